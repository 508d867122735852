package format

import (
	"bufio"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
)

// ErrFormat is wrapped by every error about a malformed IDX file. It is an
// ErrInvalid too (errors.Is(err, ErrInvalid)).
var ErrFormat error = formatSentinel{}

// IDX is the content of an IDX file of unsigned bytes: Dims[0] items of
// Dims[1:] each.
type IDX struct {
	Dims []int
	Data []byte
}

// idxUbyte is the IDX type code of unsigned bytes.
const idxUbyte = 0x08

// maxIDXBytes bounds what a header may claim, so a corrupt header cannot
// make the reader allocate without limit.
const maxIDXBytes = 1 << 32

// ReadIDX reads an IDX file of unsigned bytes with dims dimensions (3 for
// images, 1 for labels). A file starting with the gzip magic is
// decompressed.
func ReadIDX(path string, dims int) (*IDX, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read IDX: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read IDX: %w", err)
	}
	idx, err := decodeIDX(f, st.Size(), dims)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return idx, nil
}

// maxGzipRatio bounds how many bytes one byte of a gzip stream (deflate)
// can decompress to: deflate's longest match, 258 bytes, costs at least 2
// bits; 1032 is the documented maximum ratio.
const maxGzipRatio = 1032

// decodeIDX reads an IDX file of size bytes (-1 when not known). What the
// header claims is checked against maxIDXBytes and against what size
// bytes can hold (uncompressed, or gzip's maximum ratio) before anything
// is allocated; a gzip stream of unknown size is read in pieces, so a
// short one costs only what it holds.
func decodeIDX(r io.Reader, size int64, dims int) (*IDX, error) {
	br := bufio.NewReader(r)
	var src io.Reader = br
	// room is the most data bytes the file can hold: its size less the
	// header, or a gzip stream's size times maxGzipRatio.
	room := int64(-1)
	if size >= 0 {
		room = size - int64(4+4*dims)
	}
	gzipped := false
	if head, _ := br.Peek(2); len(head) == 2 && head[0] == 0x1f && head[1] == 0x8b {
		gzipped = true
		if size >= 0 {
			room = min(size, math.MaxInt64/maxGzipRatio) * maxGzipRatio
		}
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("%w: gzip header: %v", ErrFormat, err)
		}
		defer zr.Close()
		src = zr
	}
	var magic [4]byte
	if _, err := io.ReadFull(src, magic[:]); err != nil {
		return nil, fmt.Errorf("%w: magic: %s", ErrFormat, short(err, 4))
	}
	want := [4]byte{0, 0, idxUbyte, byte(dims)}
	if magic != want {
		return nil, fmt.Errorf("%w: magic 0x%08x, want 0x%08x (unsigned bytes, %d dimensions)",
			ErrFormat, binary.BigEndian.Uint32(magic[:]), binary.BigEndian.Uint32(want[:]), dims)
	}
	hdr := make([]byte, 4*dims)
	if _, err := io.ReadFull(src, hdr); err != nil {
		return nil, fmt.Errorf("%w: dimensions: %s", ErrFormat, short(err, len(hdr)))
	}
	idx := &IDX{Dims: make([]int, dims)}
	for i := range idx.Dims {
		idx.Dims[i] = int(binary.BigEndian.Uint32(hdr[4*i:]))
	}
	// The product is checked before each multiplication: it cannot wrap.
	total := int64(1)
	for i, d := range idx.Dims {
		if d != 0 && total > maxIDXBytes/int64(d) {
			return nil, fmt.Errorf("%w: dimensions %v claim more than %d bytes", ErrFormat, idx.Dims[:i+1], int64(maxIDXBytes))
		}
		total *= int64(d)
	}
	if room >= 0 && total > room {
		return nil, fmt.Errorf("%w: data: truncated: dimensions %v need %d bytes, a file of %d bytes cannot hold them", ErrFormat, idx.Dims, total, size)
	}
	data, n, err := readIDXData(src, total, room >= 0 && !gzipped)
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		return nil, fmt.Errorf("%w: data: truncated: dimensions %v need %d bytes, file has %d", ErrFormat, idx.Dims, total, n)
	case err != nil:
		return nil, fmt.Errorf("%w: data: %v", ErrFormat, err)
	}
	idx.Data = data
	// Reading on to the end makes gzip check its CRC and length trailer, and
	// finds bytes the header does not account for.
	var extra [1]byte
	switch n, err := io.ReadFull(src, extra[:]); {
	case n > 0:
		return nil, fmt.Errorf("%w: data: longer than dimensions %v say (%d bytes)", ErrFormat, idx.Dims, total)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return nil, fmt.Errorf("%w: gzip stream truncated after the data", ErrFormat)
	case !errors.Is(err, io.EOF):
		return nil, fmt.Errorf("%w: after the data: %v", ErrFormat, err)
	}
	return idx, nil
}

// idxPiece is how much of the data readIDXData allocates at a time when
// the stream's length is not known.
const idxPiece = 16 << 20

// readIDXData reads total bytes: into one allocation when known says the
// file holds them (an uncompressed file of known size), otherwise in
// pieces of idxPiece, so that memory follows the bytes that arrive. n is
// how many bytes were read.
func readIDXData(src io.Reader, total int64, known bool) (data []byte, n int64, err error) {
	if known || total <= idxPiece {
		data = make([]byte, total)
		k, err := io.ReadFull(src, data)
		return data, int64(k), err
	}
	for int64(len(data)) < total {
		at := len(data)
		data = slices.Grow(data, int(min(total-int64(at), idxPiece)))
		data = data[:at+int(min(total-int64(at), idxPiece))]
		k, err := io.ReadFull(src, data[at:])
		if err != nil {
			return nil, int64(at + k), err
		}
	}
	return data, total, nil
}

func short(err error, want int) string {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Sprintf("truncated: file ends before %d bytes", want)
	}
	return err.Error()
}
