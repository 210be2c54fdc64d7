# Sourced by controlplane.sh: which processes are the control plane's.
# Needs R (the directory of pid files) and D (the state directory, whose
# logs/ gets each process's output).
#
# A process is ours by what it is, not by what it reads like: spawn records
# its PID and its start time (field 22 of /proc/PID/stat, clock ticks since
# boot), which execve(2) keeps and a reused PID does not share. Its argv is
# no proof: during execve /proc/PID/cmdline reads empty for a moment (widest
# when the binary is not in the page cache), and a starting process was
# taken for a dead one.

# stat_of PID: the fields of /proc/PID/stat after "(comm) ", from the state on.
stat_of() { sed 's/.*) //' "/proc/$1/stat" 2>/dev/null; }

# ours NAME: is the process spawn started as NAME alive (not a zombie), the
# same process (its recorded start time)?
ours() {
	[ -f "$R/$1.pid" ] && [ -f "$R/$1.start" ] || return 1
	alive "$(cat "$R/$1.pid")" "$(cat "$R/$1.start")"
}

# alive PID START: PID runs, is not a zombie and started at START.
alive() {
	[ -n "$1" ] && [ -n "$2" ] || return 1
	set -- "$2" $(stat_of "$1")
	[ $# -ge 21 ] || return 1
	case $2 in Z | X) return 1 ;; esac
	[ "${21}" = "$1" ]
}

# record NAME PID: the pid and start-time files of a process just started.
record() {
	echo "$2" >"$R/$1.pid"
	set -- "$1" $(stat_of "$2")
	echo "${21:-}" >"$R/$1.start"
}

spawn() { # NAME ARGV...
	n=$1
	shift
	setsid "$@" >"$D/logs/$n.log" 2>&1 </dev/null &
	record "$n" $!
}
