// Package protocol is scopecheck's backend process protocol (docs/protocol.md) for a Go
// backend: the JSON-lines request loop on stdin/stdout (Serve), the contract's checks in the
// model's order, and a Session's state rebuilt from its records.  A backend supplies only its
// store: a Repository of Sessions under a root, each open Session a Storage whose commit makes
// the record State.Commit hands it durable.  The example backend (examples/go/backend.go) and
// the store backends (examples/go/stores/) are built on it.
package protocol
