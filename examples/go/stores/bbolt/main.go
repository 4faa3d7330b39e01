// A backend on bbolt (go.etcd.io/bbolt), a copy-on-write B+tree in one file, one database per
// Session, speaking scopecheck's process protocol (built as docs/findings.md, "The Go stores",
// says):
//
//	scopecheck validate --exec 'bbolt-backend'            # NoSync false, bbolt's default
//	scopecheck validate --exec 'bbolt-backend --nosync'   # NoSync true
//
// A Session is one file, <id>.bbolt.  A commit is one read-write transaction (DB.Update)
// putting the record into the bucket "records" under the bucket's NextSequence, 8 bytes big
// endian, so a cursor walks the records in commit order; the bucket is made by the first
// commit.  bbolt writes a transaction's dirty pages with pwrite, fdatasyncs, then writes and
// fdatasyncs the meta page (tx.go, Tx.Commit); reads go through a read-only mapping of the
// file.  NoSync true skips both fdatasyncs: "Do not set this flag for normal use" (db.go,
// DB.NoSync).  A lock timeout makes a lock still held an error rather than a wait without end
// (db.go, Options.Timeout: "When set to zero it will wait indefinitely").
package main

import (
	"encoding/binary"
	"flag"
	"time"

	bolt "go.etcd.io/bbolt"

	"scopecheck-example/stores/sessions"
)

var bucket = []byte("records")

type boltLog struct{ db *bolt.DB }

func (l boltLog) Records() (records [][]byte, err error) {
	err = l.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucket)
		if b == nil {
			return nil // no commit yet
		}
		return b.ForEach(func(_, v []byte) error {
			records = append(records, append([]byte(nil), v...)) // v lives as long as the transaction
			return nil
		})
	})
	return records, err
}

func (l boltLog) Append(record []byte) error {
	return l.db.Update(func(tx *bolt.Tx) error { // committed when it returns nil, else rolled back
		b, err := tx.CreateBucketIfNotExists(bucket)
		if err != nil {
			return err
		}
		n, err := b.NextSequence()
		if err != nil {
			return err
		}
		key := make([]byte, 8)
		binary.BigEndian.PutUint64(key, n)
		return b.Put(key, record)
	})
}

func (l boltLog) Close() error { return l.db.Close() }

type boltStore struct{ options bolt.Options }

func (boltStore) Suffix() string { return ".bbolt" }

func (s boltStore) Build(path string) error {
	db, err := bolt.Open(path, 0o600, &s.options) // creates the file and writes its first pages
	if err != nil {
		return err
	}
	return db.Close()
}

func (s boltStore) Connect(path string) (sessions.Log, error) {
	db, err := bolt.Open(path, 0o600, &s.options)
	if err != nil {
		return nil, err
	}
	return boltLog{db}, nil
}

func main() {
	noSync := flag.Bool("nosync", false, "set bbolt's NoSync: commit without fdatasync")
	flag.Parse()
	options := *bolt.DefaultOptions
	options.Timeout = time.Second
	options.NoSync = *noSync
	sessions.Serve("bbolt", boltStore{options}, *noSync) // a file: no directory to fsync
}
