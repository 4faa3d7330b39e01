package protocol

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// SyncDir fsyncs the directory at dir: what makes the names created, renamed or removed in
// it durable (CRASH-FS-6).
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// FileName is encodeURIComponent(id) + suffix, as the Node example names its files: one name
// per Session id, however the id is spelled (`a/b` and `a%2Fb`, `.` and `..` stay apart).
func FileName(id, suffix string) string {
	var b strings.Builder
	for i := 0; i < len(id); i++ {
		c := id[i]
		if c < 0x80 && (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-_.!~*'()", c) >= 0) {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String() + suffix
}

// SessionOf is the Session id a file name of FileName's names; false for any other name.
func SessionOf(name, suffix string) (string, bool) {
	if !strings.HasSuffix(name, suffix) {
		return "", false
	}
	name = strings.TrimSuffix(name, suffix)
	var b []byte
	for i := 0; i < len(name); i++ {
		if name[i] != '%' {
			b = append(b, name[i])
			continue
		}
		if i+2 >= len(name) {
			return "", false
		}
		n, err := strconv.ParseUint(name[i+1:i+3], 16, 8)
		if err != nil {
			return "", false
		}
		b = append(b, byte(n))
		i += 2
	}
	return string(b), true
}
