package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/google/rpmpack"
)

// An RPM as nfpm writes it (rpmpack), with triggers added: the header has
// the trigger tags, everything else unchanged, the signature header's size
// and SHA256 match the new header, the payload is the same bytes. (TestRPM
// in test/package also reads a real package back with rpm -K and
// --triggers.)
func TestAddTriggers(t *testing.T) {
	r, err := rpmpack.NewRPM(rpmpack.RPMMetaData{Name: "x", Version: "1.0", Release: "1", Arch: "x86_64", Licence: "MIT"})
	if err != nil {
		t.Fatal(err)
	}
	r.AddFile(rpmpack.RPMFile{Name: "/usr/sbin/x", Body: []byte("hello"), Mode: 0o100755})
	r.AddPostin("echo post")
	var buf bytes.Buffer
	if err := r.Write(&buf); err != nil {
		t.Fatal(err)
	}
	in := buf.Bytes()
	out, err := addTriggers(in, "systemd", "echo trig\n")
	if err != nil {
		t.Fatal(err)
	}

	sigIn, sigLenIn, _ := parseHeader(in[leadSize:], tagSigs)
	hdrIn, hdrLenIn, _ := parseHeader(in[leadSize+sigLenIn+(8-sigLenIn%8)%8:], tagImmutable)
	payloadIn := in[leadSize+sigLenIn+(8-sigLenIn%8)%8+hdrLenIn:]

	if !bytes.Equal(out[:leadSize], in[:leadSize]) {
		t.Error("lead changed")
	}
	sig, sigLen, err := parseHeader(out[leadSize:], tagSigs)
	if err != nil {
		t.Fatal(err)
	}
	at := leadSize + sigLen + (8-sigLen%8)%8
	hdr, hdrLen, err := parseHeader(out[at:], tagImmutable)
	if err != nil {
		t.Fatal(err)
	}
	hb, payload := out[at:at+hdrLen], out[at+hdrLen:]
	if !bytes.Equal(payload, payloadIn) {
		t.Error("payload changed")
	}
	// Re-serialising the input's header gives the input's bytes: the
	// layout is rpmpack's.
	if !bytes.Equal(writeHeader(tagImmutable, append([]entry{}, hdrIn...)), in[leadSize+sigLenIn+(8-sigLenIn%8)%8:][:hdrLenIn]) {
		t.Error("writeHeader does not reproduce rpmpack's header")
	}
	if !bytes.Equal(writeHeader(tagSigs, append([]entry{}, sigIn...)), in[leadSize:][:sigLenIn]) {
		t.Error("writeHeader does not reproduce rpmpack's signature header")
	}

	got := map[int]entry{}
	for _, e := range hdr {
		got[e.tag] = e
	}
	for _, e := range hdrIn {
		if g, ok := got[e.tag]; !ok || !bytes.Equal(g.data, e.data) || g.typ != e.typ || g.count != e.count {
			t.Errorf("tag %d changed", e.tag)
		}
	}
	want := map[int]string{
		tagTriggerScripts:    "echo trig\n\x00echo trig\n\x00",
		tagTriggerName:       "systemd\x00systemd\x00",
		tagTriggerVersion:    "\x00\x00",
		tagTriggerScriptProg: "/bin/sh\x00/bin/sh\x00",
	}
	for tag, w := range want {
		if e := got[tag]; string(e.data) != w || e.typ != typeStringArray || e.count != 2 {
			t.Errorf("tag %d: %+v", tag, e)
		}
	}
	ints := func(tag int) string {
		e := got[tag]
		var vs []uint32
		for i := 0; i+4 <= len(e.data); i += 4 {
			vs = append(vs, binary.BigEndian.Uint32(e.data[i:]))
		}
		return fmt.Sprint(e.typ, vs)
	}
	if s := ints(tagTriggerFlags); s != fmt.Sprint(typeInt32, []uint32{senseTriggerIn, senseTriggerPostUn}) {
		t.Errorf("flags %s", s)
	}
	if s := ints(tagTriggerIndex); s != fmt.Sprint(typeInt32, []uint32{0, 1}) {
		t.Errorf("index %s", s)
	}

	for _, e := range sig {
		switch e.tag {
		case sigSize:
			if n := binary.BigEndian.Uint32(e.data); int(n) != len(hb)+len(payload) {
				t.Errorf("size %d, want %d", n, len(hb)+len(payload))
			}
		case sigSHA256:
			if s := strings.TrimRight(string(e.data), "\x00"); s != fmt.Sprintf("%x", sha256.Sum256(hb)) {
				t.Errorf("sha256 %s", s)
			}
		}
	}

	if _, err := addTriggers(out, "systemd", "x"); err == nil || !strings.Contains(err.Error(), "triggers already") {
		t.Errorf("second run: %v", err)
	}
	if _, err := addTriggers([]byte("not an rpm at all, not at all, not at all, not at all, not at all, not at all, not at all"), "s", "x"); err == nil {
		t.Error("garbage accepted")
	}
}
