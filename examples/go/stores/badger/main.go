// A backend on Badger v2 (github.com/dgraph-io/badger/v2), a log-structured merge tree with a
// separate value log, one database per Session:
//
//	scopecheck validate --exec 'badger-backend'                   # SyncWrites true, v2's default
//	scopecheck validate --exec 'badger-backend --no-sync-writes'  # SyncWrites false
//	scopecheck validate --exec 'badger-backend --truncate'        # SyncWrites true, Truncate true
//
// A Session is a Badger directory, <id>.badger (MANIFEST, KEYREGISTRY, the value log
// 000000.vlog, sorted tables *.sst once a memtable is flushed -- Badger flushes it on Close,
// CompactL0OnClose -- and the LOCK it holds while open).  A commit is one read-write
// transaction (DB.Update) setting the record under an 8-byte big-endian commit counter, so an
// iterator walks the records in commit order.  Every entry goes to the value log before the
// memtable; with SyncWrites true, v2's default (options.go, DefaultOptions and
// WithSyncWrites: "The default value of SyncWrites is true"), the value log is opened O_DSYNC,
// so a commit returns once its entry is on disk.  With SyncWrites false the entry is written
// and acknowledged without a sync.  Truncate, false by default (options.go, WithTruncate),
// decides what an open does with bytes past the value log's last whole entry: refuse to open
// (ErrTruncateNeeded, "Value log truncate required to run DB") or cut them off; the error's
// own words lead a user to set it.  The settings other than the defaults also fsync the
// Session's directory after Badger made its files, so what they lose is the setting's.  The
// log level is WARNING (the INFO lines of every open and close say nothing about durability).
package main

import (
	"encoding/binary"
	"flag"

	badger "github.com/dgraph-io/badger/v2"

	"scopecheck-example/stores/sessions"
)

type badgerLog struct {
	db    *badger.DB
	count uint64
}

func (l *badgerLog) Records() (records [][]byte, err error) {
	err = l.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.DefaultIteratorOptions)
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			records = append(records, v)
		}
		return nil
	})
	return records, err
}

func (l *badgerLog) Append(record []byte) error {
	key := make([]byte, 8)
	binary.BigEndian.PutUint64(key, l.count)
	err := l.db.Update(func(txn *badger.Txn) error { return txn.Set(key, record) })
	if err == nil {
		l.count++
	}
	return err
}

func (l *badgerLog) Close() error { return l.db.Close() }

type badgerStore struct{ options badger.Options }

func (badgerStore) Suffix() string { return ".badger" }

func (s badgerStore) Build(path string) error {
	db, err := badger.Open(s.options.WithDir(path).WithValueDir(path))
	if err != nil {
		return err
	}
	return db.Close()
}

func (s badgerStore) Connect(path string) (sessions.Log, error) {
	db, err := badger.Open(s.options.WithDir(path).WithValueDir(path))
	if err != nil {
		return nil, err
	}
	l := &badgerLog{db: db}
	err = db.View(func(txn *badger.Txn) error {
		options := badger.DefaultIteratorOptions
		options.PrefetchValues = false
		it := txn.NewIterator(options)
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			l.count++
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, err
	}
	return l, nil
}

func main() {
	noSync := flag.Bool("no-sync-writes", false, "set Badger's SyncWrites false: commit without a sync")
	truncate := flag.Bool("truncate", false, "set Badger's Truncate: cut a value log's damaged tail off at open")
	flag.Parse()
	options := badger.DefaultOptions("").WithLoggingLevel(badger.WARNING).WithTruncate(*truncate)
	if *noSync {
		options = options.WithSyncWrites(false)
	}
	sessions.Serve("badger", badgerStore{options}, *noSync || *truncate)
}
