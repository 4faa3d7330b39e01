// A backend on goleveldb (github.com/syndtr/goleveldb), LevelDB in pure Go, one database per
// Session:
//
//	scopecheck validate --exec 'leveldb-backend'          # WriteOptions.Sync false, the default
//	scopecheck validate --exec 'leveldb-backend --sync'   # WriteOptions{Sync: true}
//
// A Session is a LevelDB directory, <id>.leveldb (CURRENT, MANIFEST-*, the journal *.log, sorted
// tables *.ldb after a compaction, LOG and the LOCK it holds while open).  A commit is one Put
// of the record under an 8-byte big-endian commit counter (a Put is a batch of one, written to
// the journal as one record), so an iterator walks the records in commit order.  The database
// is opened with goleveldb's defaults.  The write options are the default (nil: Sync false --
// the journal is written and the Put acknowledged without an fsync, opt/options.go,
// WriteOptions.Sync) or Sync true, which also fsyncs the Session's directory after goleveldb
// made its files.
package main

import (
	"encoding/binary"
	"flag"

	"github.com/syndtr/goleveldb/leveldb"
	"github.com/syndtr/goleveldb/leveldb/opt"

	"scopecheck-example/stores/sessions"
)

type levelLog struct {
	db    *leveldb.DB
	write *opt.WriteOptions
	count uint64
}

func (l *levelLog) Records() (records [][]byte, err error) {
	it := l.db.NewIterator(nil, nil)
	defer it.Release()
	for it.Next() {
		records = append(records, append([]byte(nil), it.Value()...)) // reused by the next Next
	}
	return records, it.Error()
}

func (l *levelLog) Append(record []byte) error {
	key := make([]byte, 8)
	binary.BigEndian.PutUint64(key, l.count)
	err := l.db.Put(key, record, l.write)
	if err == nil {
		l.count++
	}
	return err
}

func (l *levelLog) Close() error { return l.db.Close() }

type levelStore struct{ write *opt.WriteOptions }

func (levelStore) Suffix() string { return ".leveldb" }

func (levelStore) Build(path string) error {
	db, err := leveldb.OpenFile(path, nil)
	if err != nil {
		return err
	}
	return db.Close()
}

func (s levelStore) Connect(path string) (sessions.Log, error) {
	db, err := leveldb.OpenFile(path, nil)
	if err != nil {
		return nil, err
	}
	l := &levelLog{db: db, write: s.write}
	it := db.NewIterator(nil, nil)
	for it.Next() {
		l.count++
	}
	it.Release()
	if err := it.Error(); err != nil {
		db.Close()
		return nil, err
	}
	return l, nil
}

func main() {
	sync := flag.Bool("sync", false, "write with opt.WriteOptions{Sync: true}: fsync the journal on every Put")
	flag.Parse()
	var write *opt.WriteOptions // nil: the defaults, Sync false
	if *sync {
		write = &opt.WriteOptions{Sync: true}
	}
	sessions.Serve("leveldb", levelStore{write}, *sync)
}
