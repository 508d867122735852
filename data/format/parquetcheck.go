package format

// The checks of a Parquet file's bytes before parquet-go decodes them
// (issue 30's rule: every size, count or depth a file declares is checked
// against a bound and the bytes actually there before anything is
// allocated): the footer and offset indexes walked as Thrift, the footer's
// metadata, and each column chunk's page headers.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/encoding/thrift"
	"github.com/parquet-go/parquet-go/format"
)

// Bounds on what a Parquet file's metadata may declare, checked (with
// the bytes actually there) before parquet-go decodes it: its decoder
// allocates a list whole from the count a header declares, and recurses
// into nested values without a limit.
const (
	// maxFooterBytes bounds a footer's length.
	maxFooterBytes = 64 << 20
	// maxThriftDepth bounds the nesting of structs, lists and maps in one
	// Thrift message (Thrift's own default recursion limit is 64).
	maxThriftDepth = 64
	// maxThriftList bounds the elements of one list, set or map (Arrow's
	// Parquet reader refuses more than 1M by default).
	maxThriftList = 1 << 20
	// maxThriftStructs bounds the struct elements of all lists and maps
	// of one message: each decodes to at most 560 bytes (a ColumnChunk),
	// so 4M of them to about 2 GiB at most.
	maxThriftStructs = 4 << 20
)

// Thrift compact protocol types.
const (
	tTrue, tFalse, tI8, tI16, tI32, tI64, tDouble, tBinary, tList, tSet, tMap, tStruct, tUUID = 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13
)

// errThriftShort: a Thrift message ends inside a value.
var errThriftShort = errors.New("ends inside a value")

// thriftCheck walks the Thrift compact-protocol struct at the start of b
// without decoding it, and returns its length: every length and count it
// declares is checked against the bytes left (each element takes at least
// one) and the bounds above, the nesting against maxThriftDepth. The walk
// is iterative; what passes decodes with parquet-go's thrift package
// without allocating more than a bounded multiple of len(b).
func thriftCheck(b []byte) (int, error) {
	type frame struct {
		n        int  // elements left (a map's keys and values both count)
		typ, val byte // element type; a map's value type (0: not a map)
		isVal    bool // a map's next element is a value
		isStruct bool
	}
	stack := []frame{{isStruct: true}}
	pos, structs := 0, 0
	for len(stack) > 0 {
		top := &stack[len(stack)-1]
		var typ byte
		if top.isStruct {
			if pos >= len(b) {
				return 0, errThriftShort
			}
			h := b[pos]
			pos++
			if h == 0 {
				stack = stack[:len(stack)-1]
				continue
			}
			if h>>4 == 0 { // the field's id follows, not a delta
				if _, k := binary.Varint(b[pos:]); k <= 0 {
					return 0, fmt.Errorf("field id at byte %d: %w", pos, errThriftShort)
				} else {
					pos += k
				}
			}
			typ = h & 0x0f
			if typ == tTrue || typ == tFalse {
				continue // a bool field's value is its type
			}
		} else {
			if top.n == 0 {
				stack = stack[:len(stack)-1]
				continue
			}
			top.n--
			typ = top.typ
			if top.val != 0 {
				if top.isVal {
					typ = top.val
				}
				top.isVal = !top.isVal
			}
		}
		left := len(b) - pos
		switch typ {
		case tTrue, tFalse, tI8:
			pos++
		case tI16, tI32, tI64:
			_, k := binary.Uvarint(b[pos:])
			if k <= 0 {
				return 0, fmt.Errorf("integer at byte %d: %w", pos, errThriftShort)
			}
			pos += k
		case tDouble:
			pos += 8
		case tUUID:
			pos += 16
		case tBinary:
			n, k := binary.Uvarint(b[pos:])
			if k <= 0 || n > uint64(left-k) {
				return 0, fmt.Errorf("a binary at byte %d declares %d bytes, %d are left", pos, n, max(left-k, 0))
			}
			pos += k + int(n)
		case tList, tSet, tMap:
			if left < 1 {
				return 0, errThriftShort
			}
			var n uint64
			f := frame{typ: b[pos] & 0x0f}
			if typ == tMap {
				var k int
				if n, k = binary.Uvarint(b[pos:]); k <= 0 {
					return 0, fmt.Errorf("map at byte %d: %w", pos, errThriftShort)
				}
				pos += k
				if n > uint64(len(b)) {
					return 0, fmt.Errorf("a map at byte %d declares %d entries, %d bytes are left", pos, n, len(b)-pos)
				}
				if n > 0 {
					if pos >= len(b) {
						return 0, errThriftShort
					}
					f.typ, f.val = b[pos]>>4, b[pos]&0x0f
					pos++
				}
				n *= 2 // keys and values
			} else {
				if n = uint64(b[pos] >> 4); n == 15 {
					var k int
					if n, k = binary.Uvarint(b[pos+1:]); k <= 0 {
						return 0, fmt.Errorf("list at byte %d: %w", pos, errThriftShort)
					}
					pos += k
				}
				pos++
			}
			if n > uint64(len(b)-pos) || n > 2*maxThriftList {
				return 0, fmt.Errorf("a list or map at byte %d declares %d elements, %d bytes are left", pos, n, len(b)-pos)
			}
			if typ != tMap && n > maxThriftList {
				return 0, fmt.Errorf("a list at byte %d declares %d elements, more than %d", pos, n, maxThriftList)
			}
			if f.typ == tStruct || f.val == tStruct {
				if structs += int(n); structs > maxThriftStructs {
					return 0, fmt.Errorf("more than %d structs in lists", maxThriftStructs)
				}
			}
			f.n = int(n)
			stack = append(stack, f)
		case tStruct:
			stack = append(stack, frame{isStruct: true})
		default:
			return 0, fmt.Errorf("unknown type %d at byte %d", typ, pos)
		}
		if pos > len(b) {
			return 0, errThriftShort
		}
		if len(stack) > maxThriftDepth {
			return 0, fmt.Errorf("nested deeper than %d at byte %d", maxThriftDepth, pos)
		}
	}
	return pos, nil
}

// pqCheckFooter checks a Parquet file's footer before parquet-go opens it:
// its length against the file's size and maxFooterBytes, its bytes with
// thriftCheck, then what the decoded metadata declares (pqCheckMeta).
func pqCheckFooter(ra io.ReaderAt, size int64) error {
	if size < 12 {
		return fmt.Errorf("%d bytes: too short for a Parquet file (12 at least)", size)
	}
	var head, tail [8]byte
	if err := readFullAt(ra, head[:4], 0); err != nil {
		return err
	}
	if err := readFullAt(ra, tail[:], size-8); err != nil {
		return err
	}
	if string(head[:4]) != "PAR1" || string(tail[4:]) != "PAR1" {
		return fmt.Errorf("magic %q ... %q, want \"PAR1\" at both ends (an encrypted footer, PARE, is not supported)", head[:4], tail[4:])
	}
	n := int64(binary.LittleEndian.Uint32(tail[:4]))
	if n > size-12 || n > maxFooterBytes {
		return fmt.Errorf("footer_length %d: a file of %d bytes holds at most %d, and a footer may have at most %d", n, size, size-12, maxFooterBytes)
	}
	buf := make([]byte, n)
	if err := readFullAt(ra, buf, size-8-n); err != nil {
		return err
	}
	used, err := thriftCheck(buf)
	if err == nil && used != len(buf) {
		err = fmt.Errorf("%d bytes after the metadata", len(buf)-used)
	}
	if err != nil {
		return fmt.Errorf("footer: %w", err)
	}
	var md format.FileMetaData
	if err := thrift.Unmarshal(&thrift.CompactProtocol{}, buf, &md); err != nil {
		return fmt.Errorf("footer: %w", err)
	}
	return pqCheckMeta(&md, size-8-n)
}

// readFullAt reads len(p) bytes at off: a ReaderAt may return io.EOF with
// the last bytes of the file.
func readFullAt(ra io.ReaderAt, p []byte, off int64) error {
	n, err := ra.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// pqCheckMeta checks what a footer's metadata declares that parquet-go
// allocates from or seeks with: the schema's nesting (at most
// parquet.MaxColumnDepth, children counts not negative), each row group's
// rows (not negative, their sum not overflowing) and columns (one per
// leaf of the schema: parquet-go allocates leaves × row groups), and each
// column chunk's bytes (inside the file, before the footer at end).
func pqCheckMeta(md *format.FileMetaData, end int64) error {
	if len(md.Schema) == 0 {
		return errors.New("footer: no schema")
	}
	leaves := 0
	var open []int32 // children still to come, per level
	for i := range md.Schema {
		e := &md.Schema[i]
		if len(open) > parquet.MaxColumnDepth {
			return fmt.Errorf("schema element %d (%q): nested deeper than %d", i, e.Name, parquet.MaxColumnDepth)
		}
		if e.Type.Valid {
			leaves++
		}
		if c := e.NumChildren; c.Valid && c.V < 0 {
			return fmt.Errorf("schema element %d (%q): num_children %d", i, e.Name, c.V)
		} else if c.Valid && c.V > 0 {
			open = append(open, c.V)
			continue
		}
		for len(open) > 0 {
			if open[len(open)-1]--; open[len(open)-1] > 0 {
				break
			}
			open = open[:len(open)-1]
		}
	}
	var rows int64
	for g := range md.RowGroups {
		rg := &md.RowGroups[g]
		if rg.NumRows < 0 || rows > math.MaxInt64-rg.NumRows {
			return fmt.Errorf("row group %d: num_rows %d (after %d rows)", g, rg.NumRows, rows)
		}
		rows += rg.NumRows
		if len(rg.Columns) != leaves {
			return fmt.Errorf("row group %d: %d column chunks, the schema has %d leaf columns", g, len(rg.Columns), leaves)
		}
		for c := range rg.Columns {
			m := &rg.Columns[c].MetaData
			start := m.DataPageOffset
			if m.DictionaryPageOffset > 0 && m.DictionaryPageOffset < start {
				start = m.DictionaryPageOffset
			}
			if start < 4 || m.TotalCompressedSize < 0 || start > end || m.TotalCompressedSize > end-start {
				return fmt.Errorf("row group %d, column chunk %d: %d bytes at offset %d, outside the data (bytes 4 to %d)", g, c, m.TotalCompressedSize, start, end)
			}
		}
	}
	return nil
}

// Bounds on what a page header may declare.
const (
	// maxPageHeader bounds a page header's bytes (statistics included):
	// Arrow's reader refuses more than 16 MiB too.
	maxPageHeader = 16 << 20
	// maxPageBytes bounds a page's bytes, compressed or not: parquet-go
	// allocates both whole from the header.
	maxPageBytes = 1 << 30
)

// maxRatio is, for the codecs that have one, how many bytes one
// compressed byte can become at most: Snappy's longest copy, 64 bytes, costs
// 3 bytes (rounded up to 32); deflate's is 1032; LZ4's a match length byte
// of 255. Zstd and Brotli have none that is useful: maxPageBytes bounds
// them.
var maxRatio = map[format.CompressionCodec]int64{format.Snappy: 32, format.Gzip: 1032, format.Lz4: 256, format.Lz4Raw: 256}

// checkPages walks the page headers of u's column chunk c once (for
// every read of the chunk after), before parquet-go reads them: its
// thrift decoder allocates a binary's declared length, and its page
// reader a page's declared sizes, before reading the bytes. Each header
// must pass thriftCheck within the chunk; each page fit in the chunk;
// its uncompressed size be at most maxPageBytes (the compressed size
// when not compressed); its counts be at most the row group's rows (a
// data page: one value a row, the columns read being flat) or what its
// bytes hold (a dictionary: a bit a value at least); and the data pages
// together hold at least the row group's rows, which read allocates
// for.
func (s *pqSource) checkPages(u pqUnit, c pqCol, ra io.ReaderAt) error {
	key := [3]int{u.file, u.rg, c.leaf}
	s.mu.Lock()
	err, done := s.checked[key]
	s.mu.Unlock()
	if done {
		return err
	}
	pf, err := s.acquire(context.Background(), u.file)
	if err != nil {
		return err
	}
	defer s.release(u.file)
	if ra == nil {
		ra = pf
	}
	md := &pf.Metadata().RowGroups[u.rg].Columns[c.leaf].MetaData
	err = walkPages(ra, md, pf.Metadata().RowGroups[u.rg].NumRows)
	s.mu.Lock()
	if s.checked == nil {
		s.checked = map[[3]int]error{}
	}
	s.checked[key] = err
	s.mu.Unlock()
	return err
}

// walkPages checks the page headers of the column chunk md of a row
// group of rows rows (see checkPages).
func walkPages(ra io.ReaderAt, md *format.ColumnMetaData, rows int64) error {
	start := md.DataPageOffset
	if md.DictionaryPageOffset > 0 && md.DictionaryPageOffset < start {
		start = md.DictionaryPageOffset
	}
	end := start + md.TotalCompressedSize // inside the file: pqCheckMeta
	buf := make([]byte, 256)
	var sum int64 // the data pages' values (a row each, null or not)
	for off, page := start, 0; off < end; page++ {
		var n int
		var err error
		for size := int64(256); ; size *= 4 {
			size = min(size, end-off, maxPageHeader)
			if int64(cap(buf)) < size {
				buf = make([]byte, size)
			}
			b := buf[:size]
			if err = readFullAt(ra, b, off); err != nil {
				return fmt.Errorf("page %d at offset %d: %w", page, off, err)
			}
			if n, err = thriftCheck(b); err == nil || !errors.Is(err, errThriftShort) || size == min(end-off, maxPageHeader) {
				break
			}
		}
		if err != nil {
			return fmt.Errorf("page %d's header at offset %d: %w", page, off, err)
		}
		var h format.PageHeader
		if err := thrift.Unmarshal(&thrift.CompactProtocol{}, buf[:n], &h); err != nil {
			return fmt.Errorf("page %d's header at offset %d: %w", page, off, err)
		}
		off += int64(n)
		bad := func(field string, v int64, why string) error {
			return fmt.Errorf("page %d at offset %d: %s %d: %s", page, off, field, v, why)
		}
		comp, unc := int64(h.CompressedPageSize), int64(h.UncompressedPageSize)
		switch {
		case comp < 0 || comp > end-off:
			return bad("compressed_page_size", comp, fmt.Sprintf("%d bytes are left in the column chunk", end-off))
		case unc < 0 || unc > maxPageBytes:
			return bad("uncompressed_page_size", unc, fmt.Sprintf("must be in [0, %d]", maxPageBytes))
		case md.Codec == format.Uncompressed && unc != comp:
			return bad("uncompressed_page_size", unc, fmt.Sprintf("the page is not compressed and has %d bytes", comp))
		case maxRatio[md.Codec] > 0 && unc > maxRatio[md.Codec]*comp+64:
			return bad("uncompressed_page_size", unc, fmt.Sprintf("%d bytes of %s inflate to at most %d", comp, md.Codec, maxRatio[md.Codec]*comp+64))
		}
		var values int64
		switch {
		case h.DataPageHeader.Valid:
			values = int64(h.DataPageHeader.V.NumValues)
		case h.DataPageHeaderV2.Valid:
			v := h.DataPageHeaderV2.V
			values = int64(v.NumValues)
			if levels := int64(v.RepetitionLevelsByteLength) + int64(v.DefinitionLevelsByteLength); v.RepetitionLevelsByteLength < 0 ||
				v.DefinitionLevelsByteLength < 0 || levels > comp || levels > unc {
				return bad("levels' bytes", levels, fmt.Sprintf("the page has %d (%d uncompressed)", comp, unc))
			}
			if v.NumRows < 0 || int64(v.NumRows) > rows || v.NumNulls < 0 || v.NumNulls > v.NumValues {
				return bad("num_rows", int64(v.NumRows), fmt.Sprintf("with %d values, %d nulls, in a row group of %d rows", v.NumValues, v.NumNulls, rows))
			}
		case h.DictionaryPageHeader.Valid:
			if d := int64(h.DictionaryPageHeader.V.NumValues); d < 0 || d > 8*unc+8 {
				return bad("dictionary num_values", d, fmt.Sprintf("%d bytes hold at most %d", unc, 8*unc+8))
			}
		}
		if values < 0 || values > rows {
			return bad("num_values", values, fmt.Sprintf("a row group of %d rows", rows))
		}
		sum += values
		off += comp
	}
	if sum < rows {
		return fmt.Errorf("the pages hold %d values, the row group declares %d rows", sum, rows)
	}
	return nil
}
