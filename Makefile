# gnsh — see README.md. Targets keep one-line bodies; scripts live in test/.
GO      ?= go
PREFIX  ?= /usr/local
# The version: VERSION (the latest release) as is on the commit that set it,
# VERSION+gitN.gHASH[.dirty] after it (install/package/version.sh).
ifeq ($(origin VERSION),undefined)
VERSION := $(shell sh install/package/version.sh)
endif
# -s -w, the version, the commit and its date (not the build's): reproducible.
LDFLAGS := $(shell sh install/package/version.sh -ldflags $(VERSION))
FUZZTIME ?= 10s

.PHONY: build man package release deps k8s test test-unit test-integration test-e2e chaos lint fuzz bench demo install clean

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o bin/gnsh ./cmd/gnsh

# gnsh(8), gnsh-shutdown(8), gnsh-config(5) from install/man/*.md (go-md2man) into bin/man.
man:
	$(GO) run ./install/man/gen -version $(VERSION) -out bin/man install/man/*.md

# bin/pkg/gnsh_VERSION-1_ARCH.deb and gnsh-VERSION-1.ARCH.rpm (nfpm, a Go tool dependency).
package: build
	GNSH_PKG_VERSION=$(VERSION) sh install/package/build.sh bin/pkg

# bin/release: gnsh_VERSION_linux_{amd64,arm64}.tar.gz, the .deb and .rpm of
# both and SHA256SUMS, reproducible (install/package/release.sh).
release:
	rm -rf bin/release && GNSH_RELEASE_VERSION=$(VERSION) sh install/package/release.sh bin/release

# Host packages the tests and the demo need (Debian/Ubuntu, as root).
deps:
	sh test/deps.sh

# kube-apiserver, kube-controller-manager, etcd, kwok and kubectl built from
# Go modules, cached under /var/cache/gnsh/k8s (about 7 minutes cold); then
# the kubelet and fakecri for the e2e nodes (a set of its own, ~7 min cold).
k8s:
	sh test/k8s/build.sh
	sh test/k8s/build.sh kubelet

# The whole suite: lint, unit + integration + oracle tests (race detector),
# short fuzz runs, then real systemd in nspawn containers.
test: deps lint build k8s
	GNSH_REQUIRE_RIGS=1 $(GO) test -race -count=1 ./...
	$(MAKE) fuzz
	$(MAKE) test-e2e

test-unit:
	$(GO) test -race -count=1 ./internal/... ./wrappers/...

test-integration:
	GNSH_REQUIRE_RIGS=1 $(GO) test -count=1 -v ./test/integration/ ./test/oracle/

test-e2e: build k8s
	GNSH_BIN=$(CURDIR)/bin/gnsh $(GO) test -tags e2e -count=1 -timeout 45m -v ./test/e2e/

# The node agent's chaos loop alone, many cycles (make test runs 3): reboots
# through random ways with random faults on both suites; the seed it prints
# replays a run (GNSH_E2E_CHAOS_SEED=N make chaos).
CHAOS_CYCLES ?= 30
chaos: deps build k8s
	GNSH_E2E_CHAOS_CYCLES=$(CHAOS_CYCLES) GNSH_BIN=$(CURDIR)/bin/gnsh $(GO) test -tags e2e -count=1 -timeout 180m -v -run 'TestAgentE2E/.*/chaos$$' ./test/e2e/

lint:
	test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...
	$(GO) vet -tags e2e ./test/e2e/

fuzz:
	sh test/fuzz.sh $(FUZZTIME)

# gnsh drain vs kubectl drain on a local control plane with kwok (110 and
# 1,000 pods; about 10 minutes), and the reboot-slot gate (a free slot; 100
# and 1,000 nodes asking); writes test/bench/RESULTS.md and RESULTS-slots.md.
bench: k8s
	GNSH_REQUIRE_RIGS=1 $(GO) test -run '^$$' -bench 'Drain|Slots' -benchtime 1x -timeout 60m ./test/bench/ -args -results RESULTS.md

# Throwaway Debian bullseye containers as Kubernetes nodes of a local control
# plane, each running the real kubelet (on a fake container runtime): stock
# reboot vs gnsh's reboot (drain, then logind), kubelet's own lines beside.
demo: deps build k8s
	sh test/e2e/demo.sh

# The binary, and the node agent's unit (ExecStart names /usr/local/sbin/gnsh:
# edit the unit for another PREFIX).
install: build
	install -D -m 0755 bin/gnsh $(DESTDIR)$(PREFIX)/sbin/gnsh && install -D -m 0644 install/systemd/gnsh.service $(DESTDIR)/etc/systemd/system/gnsh.service

clean:
	rm -rf bin
