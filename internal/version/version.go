// Package version holds gnsh's version, set at build time with
// -ldflags "-X github.com/gnsh/gnsh/internal/version.Version=…".
package version

// Version is the release or `git describe` string.
var Version = "dev"
