// The Go store backends.  They build in GOPATH mode against Debian's packaged sources, at the
// versions packages.txt pins (docs/findings.md, "The Go stores"): with this folder copied as
// $GOPATH/src/scopecheck-example beside /usr/share/gocode,
//
//	GO111MODULE=off GOPATH=$GOPATH:/usr/share/gocode go build scopecheck-example/stores/bbolt
//
// Module mode cannot use /usr/share/gocode/src as replacements: several of Badger's
// dependencies there have no go.mod.  This file keeps the stores out of the example's module
// and marks them as module code, which lets GOPATH mode resolve github.com/dgraph-io/badger/v2.
module scopecheck-example/stores

go 1.19
