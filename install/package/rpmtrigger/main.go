// Command rpmtrigger adds %triggerin and %triggerpostun scriptlets on
// another package to an RPM that nfpm built (nfpm has no RPM triggers):
//
//	go run ./install/package/rpmtrigger -on systemd -script FILE PKG.rpm
//
// It rewrites the main header with the RPMTAG_TRIGGER* tags (one /bin/sh
// script, run for both) and renews the signature header's size and SHA256
// of the header (the payload and its digests are unchanged). An RPM that
// has triggers already is refused. build.sh runs it; the tests read the
// result back with rpm -qp --triggers and rpm -K.
package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
)

const (
	leadSize = 96

	tagSigs      = 62 // RPMTAG_HEADERSIGNATURES (the signature header's region)
	tagImmutable = 63 // RPMTAG_HEADERIMMUTABLE (the main header's region)

	sigSize   = 1000 // RPMSIGTAG_SIZE: header + payload
	sigSHA256 = 273  // RPMSIGTAG_SHA256: hex SHA256 of the main header
	sigSHA1   = 269  // RPMSIGTAG_SHA1: hex SHA1 of the main header (not written by rpmpack)
	sigMD5    = 1004 // RPMSIGTAG_MD5: header + payload (not written by rpmpack)

	tagTriggerScripts    = 1065
	tagTriggerName       = 1066
	tagTriggerVersion    = 1067
	tagTriggerFlags      = 1068
	tagTriggerIndex      = 1069
	tagTriggerScriptProg = 1092

	senseTriggerIn     = 1 << 16
	senseTriggerPostUn = 1 << 18

	typeChar        = 1
	typeInt8        = 2
	typeInt16       = 3
	typeInt32       = 4
	typeInt64       = 5
	typeString      = 6
	typeBin         = 7
	typeStringArray = 8
	typeI18NString  = 9
)

type entry struct {
	tag, typ, count int
	data            []byte
}

func main() {
	on := flag.String("on", "systemd", "package whose install/update and removal trigger the script")
	script := flag.String("script", "", "the scriptlet (/bin/sh) for %triggerin and %triggerpostun")
	flag.Parse()
	if *script == "" || flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: rpmtrigger -on PACKAGE -script FILE PKG.rpm")
		os.Exit(2)
	}
	if err := run(flag.Arg(0), *on, *script); err != nil {
		fmt.Fprintln(os.Stderr, "rpmtrigger:", err)
		os.Exit(1)
	}
}

func run(path, on, scriptPath string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	body, err := os.ReadFile(scriptPath)
	if err != nil {
		return err
	}
	out, err := addTriggers(b, on, string(body))
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, out, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func addTriggers(b []byte, on, script string) ([]byte, error) {
	if len(b) < leadSize || !bytes.Equal(b[:4], []byte{0xed, 0xab, 0xee, 0xdb}) {
		return nil, errors.New("not an RPM")
	}
	sig, sigLen, err := parseHeader(b[leadSize:], tagSigs)
	if err != nil {
		return nil, fmt.Errorf("signature header: %w", err)
	}
	mainAt := leadSize + sigLen + (8-sigLen%8)%8
	hdr, hdrLen, err := parseHeader(b[mainAt:], tagImmutable)
	if err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	payload := b[mainAt+hdrLen:]
	for _, e := range hdr {
		if e.tag >= tagTriggerScripts && e.tag <= tagTriggerIndex || e.tag == tagTriggerScriptProg {
			return nil, errors.New("has triggers already")
		}
	}
	for _, e := range sig {
		if e.tag == sigMD5 || e.tag == sigSHA1 || e.tag > 256 && e.tag < 1000 && e.tag != sigSHA256 {
			return nil, fmt.Errorf("signature tag %d would go stale (signed, or not rpmpack's)", e.tag)
		}
	}
	hdr = append(hdr,
		stringArray(tagTriggerScripts, script, script),
		stringArray(tagTriggerName, on, on),
		stringArray(tagTriggerVersion, "", ""),
		int32s(tagTriggerFlags, senseTriggerIn, senseTriggerPostUn),
		int32s(tagTriggerIndex, 0, 1),
		stringArray(tagTriggerScriptProg, "/bin/sh", "/bin/sh"),
	)
	hb := writeHeader(tagImmutable, hdr)
	for i, e := range sig {
		switch e.tag {
		case sigSize:
			sig[i] = int32s(sigSize, len(hb)+len(payload))
		case sigSHA256:
			sig[i] = entry{sigSHA256, typeString, 1, append([]byte(fmt.Sprintf("%x", sha256.Sum256(hb))), 0)}
		}
	}
	sb := writeHeader(tagSigs, sig)
	out := append([]byte{}, b[:leadSize]...)
	out = append(out, sb...)
	out = append(out, make([]byte, (8-len(sb)%8)%8)...)
	out = append(out, hb...)
	return append(out, payload...), nil
}

func stringArray(tag int, ss ...string) entry {
	var d []byte
	for _, s := range ss {
		d = append(append(d, s...), 0)
	}
	return entry{tag, typeStringArray, len(ss), d}
}

func int32s(tag int, vs ...int) entry {
	d := make([]byte, 4*len(vs))
	for i, v := range vs {
		binary.BigEndian.PutUint32(d[4*i:], uint32(int32(v)))
	}
	return entry{tag, typeInt32, len(vs), d}
}

// parseHeader reads a header structure (magic, index, store) and returns
// its entries but the region tag, and its length.
func parseHeader(b []byte, region int) ([]entry, int, error) {
	if len(b) < 16 || !bytes.Equal(b[:4], []byte{0x8e, 0xad, 0xe8, 0x01}) {
		return nil, 0, errors.New("bad magic")
	}
	n := int(binary.BigEndian.Uint32(b[8:]))
	size := int(binary.BigEndian.Uint32(b[12:]))
	total := 16 + 16*n + size
	if n < 1 || total > len(b) {
		return nil, 0, errors.New("bad size")
	}
	store := b[16+16*n : total]
	var es []entry
	for i := 0; i < n; i++ {
		ix := b[16+16*i:]
		tag := int(int32(binary.BigEndian.Uint32(ix)))
		typ := int(binary.BigEndian.Uint32(ix[4:]))
		off := int(int32(binary.BigEndian.Uint32(ix[8:])))
		count := int(binary.BigEndian.Uint32(ix[12:]))
		if i == 0 {
			if tag != region {
				return nil, 0, fmt.Errorf("first tag %d, want region %d", tag, region)
			}
			continue
		}
		if off < 0 || off > len(store) {
			return nil, 0, fmt.Errorf("tag %d: bad offset", tag)
		}
		l := 0
		switch typ {
		case typeChar, typeInt8, typeBin:
			l = count
		case typeInt16:
			l = 2 * count
		case typeInt32:
			l = 4 * count
		case typeInt64:
			l = 8 * count
		case typeString, typeStringArray, typeI18NString:
			for k := 0; k < count; k++ {
				z := bytes.IndexByte(store[off+l:], 0)
				if z < 0 {
					return nil, 0, fmt.Errorf("tag %d: unterminated string", tag)
				}
				l += z + 1
			}
		default:
			return nil, 0, fmt.Errorf("tag %d: type %d", tag, typ)
		}
		if off+l > len(store) {
			return nil, 0, fmt.Errorf("tag %d: data past the store", tag)
		}
		es = append(es, entry{tag, typ, count, append([]byte{}, store[off:off+l]...)})
	}
	return es, total, nil
}

// writeHeader lays a header out as rpmpack does: the region entry first in
// the index, its 16-byte trailer last in the store, the other entries sorted
// by tag with integers aligned.
func writeHeader(region int, es []entry) []byte {
	sort.SliceStable(es, func(i, j int) bool { return es[i].tag < es[j].tag })
	var store bytes.Buffer
	offs := make([]int, len(es))
	for i, e := range es {
		align := map[int]int{typeInt16: 2, typeInt32: 4, typeInt64: 8}[e.typ]
		for align > 0 && store.Len()%align != 0 {
			store.WriteByte(0)
		}
		offs[i] = store.Len()
		store.Write(e.data)
	}
	trailerAt := store.Len()
	binary.Write(&store, binary.BigEndian, []int32{int32(region), typeBin, -int32(16 * (len(es) + 1)), 16})
	var w bytes.Buffer
	w.Write([]byte{0x8e, 0xad, 0xe8, 0x01, 0, 0, 0, 0})
	binary.Write(&w, binary.BigEndian, []int32{int32(len(es) + 1), int32(store.Len())})
	binary.Write(&w, binary.BigEndian, []int32{int32(region), typeBin, int32(trailerAt), 16})
	for i, e := range es {
		binary.Write(&w, binary.BigEndian, []int32{int32(e.tag), int32(e.typ), int32(offs[i]), int32(e.count)})
	}
	w.Write(store.Bytes())
	return w.Bytes()
}
