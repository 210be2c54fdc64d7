package slots

import "errors"

// Unreadable reports whether err says that the Lease was read but its
// record cannot be (broken, or written by a newer gnsh): whose slots it
// holds is unknown, and reading it again does not mend it.
func Unreadable(err error) bool {
	return errors.As(err, new(*NewerError)) || errors.Is(err, errBadRecord)
}
