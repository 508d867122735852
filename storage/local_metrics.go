package storage

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// metricsIndexFile sits beside a local run's metrics.jsonl:
//
//	 0  metricsIndexMagic
//	 8  the inode number of the metrics.jsonl it indexes,
//	16  its size and
//	24  its modification time (ns) after the append that wrote the index
//	32  for each line of metrics.jsonl, the offset just after it
//
// all little-endian 8-byte integers. Only appends read it; readers read
// metrics.jsonl alone, which stays a plain JSON-lines file.
const metricsIndexFile = "metrics.idx"

var metricsIndexMagic = [8]byte{'t', 't', 'm', 'i', 'd', 'x', '1', '\n'}

const metricsIndexHeader = 32

// appendMetrics appends to metrics.jsonl in place. It learns how many lines
// the file holds, and where the last whole one ends, from the header and
// the last two entries of metrics.idx: trusted when the header names the
// file as it is (inode, size, modification time: nothing else wrote it since)
// and the last entry ends a line inside it. Lines past what the index covers
// (an append that died before its index was on disk) are counted by reading
// them, and a torn last line is cut off. An index that does not describe the
// file (a run written before the index existed, a copied, replaced or edited
// file, a crash between the two writes) is rebuilt by reading the file once.
// An append writes the new lines and fsyncs, then their offsets and the
// header, and fsyncs.
//
// A run that holds segments (metrics/, written through a backend wrapping
// this one) is left to the segment layout: handled is false.
func (l *Local) appendMetrics(ctx context.Context, runPrefix string, first int, lines [][]byte) (handled bool, err error) {
	if err := validKey(runPrefix + MetricsFile); err != nil {
		return false, fmt.Errorf("local storage %s: %w", l.root, err)
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	var elems []string
	if runPrefix != "" {
		elems = strings.Split(strings.TrimSuffix(runPrefix, "/"), "/")
	}
	d, err := l.openDirs(elems, true)
	if err != nil {
		return false, classifyLocal(fmt.Errorf("append to %s: %w", l.URI(runPrefix+MetricsFile), err))
	}
	defer d.close()
	var st unix.Stat_t
	switch err := unix.Fstatat(d.fd(), strings.TrimSuffix(segmentDir, "/"), &st, unix.AT_SYMLINK_NOFOLLOW); {
	case err == nil:
		return false, nil
	case !errors.Is(err, unix.ENOENT):
		return false, classifyLocal(&fs.PathError{Op: "stat", Path: filepath.Join(d.path(), segmentDir), Err: err})
	}
	mf, err := openFileAt(d, MetricsFile)
	if err != nil {
		return false, classifyLocal(err)
	}
	defer mf.Close()
	xf, err := openFileAt(d, metricsIndexFile)
	if err != nil {
		return false, classifyLocal(err)
	}
	defer xf.Close()

	ix, err := l.loadMetricsIndex(mf, xf)
	if err != nil {
		return false, err
	}
	have := int(ix.n) + len(ix.tail)
	if first > have {
		return false, fmt.Errorf("reports %d..%d would leave a gap: %s holds %d reports", first, first+len(lines)-1, mf.Name(), have)
	}
	add := lines[min(have-first, len(lines)):]
	end := ix.end
	if len(ix.tail) > 0 {
		end = ix.tail[len(ix.tail)-1]
	}
	if len(add) == 0 && ix.size == end && len(ix.tail) == 0 && !ix.rebuild {
		return true, nil // a retry of a call that completed
	}
	// The file: cut a torn line, append, fsync.
	if ix.size != end {
		if err := mf.Truncate(end); err != nil {
			return false, classifyLocal(err)
		}
	}
	ends := ix.tail
	var buf bytes.Buffer
	for _, line := range add {
		buf.Write(line)
		buf.WriteByte('\n')
		ends = append(ends, end+int64(buf.Len()))
	}
	if buf.Len() > 0 {
		if _, err := mf.WriteAt(buf.Bytes(), end); err != nil {
			return false, classifyLocal(err)
		}
		l.metricsWritten.Add(int64(buf.Len()))
	}
	if err := mf.Sync(); err != nil {
		return false, err
	}
	stamp, err := stampOf(mf)
	if err != nil {
		return false, err
	}
	// Then the index: the new entries, then the header naming the file as
	// it is now.
	if ix.rebuild {
		// Empty first, so that a cut rewrite leaves no stale entry
		// behind the new ones.
		if err := xf.Truncate(0); err != nil {
			return false, classifyLocal(err)
		}
	}
	at := int64(metricsIndexHeader) + 8*ix.n
	xb := make([]byte, 0, 8*len(ends))
	for _, e := range ends {
		xb = binary.LittleEndian.AppendUint64(xb, uint64(e))
	}
	if _, err := xf.WriteAt(xb, at); err != nil {
		return false, classifyLocal(err)
	}
	if _, err := xf.WriteAt(stamp.header(), 0); err != nil {
		return false, classifyLocal(err)
	}
	l.metricsWritten.Add(int64(len(xb)) + metricsIndexHeader)
	if err := xf.Truncate(at + int64(len(xb))); err != nil {
		return false, classifyLocal(err)
	}
	if err := xf.Sync(); err != nil {
		return false, err
	}
	if ix.rebuild || ix.size == 0 {
		// New files' directory entries.
		if err := unix.Fsync(d.fd()); err != nil {
			return false, fmt.Errorf("sync directory %s: %w", d.path(), err)
		}
	}
	return true, nil
}

// openFileAt opens (creating, mode 0666 less the umask) the regular file name
// in d for reading and writing, refusing a symbolic link.
func openFileAt(d *dirChain, name string) (*os.File, error) {
	p := filepath.Join(d.path(), name)
	fd, err := unix.Openat(d.fd(), name, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o666)
	if err != nil {
		return nil, d.refuseLink(name, p, err)
	}
	f := os.NewFile(uintptr(fd), p)
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		f.Close()
		if err == nil {
			err = &fs.PathError{Op: "open", Path: p, Err: errors.New("not a regular file")}
		}
		return nil, err
	}
	return f, nil
}

// fileStamp identifies a file's content as an append left it.
type fileStamp struct {
	ino         uint64
	size, mtime int64
}

func stampOf(f *os.File) (fileStamp, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fileStamp{}, &fs.PathError{Op: "stat", Path: f.Name(), Err: err}
	}
	return fileStamp{uint64(st.Ino), st.Size, st.Mtim.Nano()}, nil
}

// header is the index header naming the file as s.
func (s fileStamp) header() []byte {
	h := append([]byte(nil), metricsIndexMagic[:]...)
	h = binary.LittleEndian.AppendUint64(h, s.ino)
	h = binary.LittleEndian.AppendUint64(h, uint64(s.size))
	return binary.LittleEndian.AppendUint64(h, uint64(s.mtime))
}

// metricsIndex is what loadMetricsIndex learns.
type metricsIndex struct {
	size int64 // of metrics.jsonl
	// n lines are indexed, the last ending at end.
	n, end int64
	// tail holds the ends of the whole lines after end, which the index
	// does not list yet.
	tail []int64
	// rebuild: the index must be rewritten from its start (n is 0).
	rebuild bool
}

// loadMetricsIndex reads the header and the last entries of metrics.idx and
// checks them against metrics.jsonl; when they do not describe it, it starts
// over (rebuild) from the file's beginning. Lines past the index are read
// either way.
func (l *Local) loadMetricsIndex(mf, xf *os.File) (metricsIndex, error) {
	var ix metricsIndex
	stamp, err := stampOf(mf)
	if err != nil {
		return ix, err
	}
	xst, err := xf.Stat()
	if err != nil {
		return ix, err
	}
	ix.size = stamp.size
	if !l.indexMatches(&ix, stamp, xf, xst.Size(), mf) {
		ix.n, ix.end, ix.rebuild = 0, 0, true
	}
	if ix.size > ix.end {
		tail := io.NewSectionReader(mf, ix.end, ix.size-ix.end)
		off := ix.end
		buf := make([]byte, 64<<10)
		for {
			k, err := tail.Read(buf)
			l.metricsRead.Add(int64(k))
			for i, c := range buf[:k] {
				if c == '\n' {
					ix.tail = append(ix.tail, off+int64(i)+1)
				}
			}
			off += int64(k)
			if err == io.EOF {
				break
			}
			if err != nil {
				return ix, fmt.Errorf("read %s: %w", mf.Name(), err)
			}
		}
	}
	return ix, nil
}

// indexMatches reads the header and the last two entries of the index and
// sets ix.n and ix.end when they describe mf: its stamp, offsets that grow,
// the last inside the file and just after a newline.
func (l *Local) indexMatches(ix *metricsIndex, stamp fileStamp, xf *os.File, xsize int64, mf *os.File) bool {
	if xsize < metricsIndexHeader {
		return false
	}
	var h [metricsIndexHeader]byte
	if _, err := xf.ReadAt(h[:], 0); err != nil {
		return false
	}
	l.metricsRead.Add(metricsIndexHeader)
	if !bytes.Equal(h[:], stamp.header()) {
		return false
	}
	n := (xsize - metricsIndexHeader) / 8
	if n == 0 {
		return true
	}
	k := min(n, 2)
	var e [16]byte
	if _, err := xf.ReadAt(e[:8*k], metricsIndexHeader+8*(n-k)); err != nil {
		return false
	}
	l.metricsRead.Add(8 * k)
	last := int64(binary.LittleEndian.Uint64(e[8*(k-1):]))
	prev := int64(0)
	if k == 2 {
		prev = int64(binary.LittleEndian.Uint64(e[:8]))
	}
	if prev < 0 || last <= prev || last > ix.size || last < n {
		return false
	}
	var nl [1]byte
	if _, err := mf.ReadAt(nl[:], last-1); err != nil || nl[0] != '\n' {
		return false
	}
	l.metricsRead.Add(1)
	ix.n, ix.end = n, last
	return true
}
