package upstream

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/lbgo/balancer"
)

// FuzzParse checks that ParseAll and Parse never panic and return either
// blocks whose invariants hold or a *ParseError that points inside the
// text. The seed corpus is in testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	f.Fuzz(func(t *testing.T, src []byte) {
		lines := bytes.Count(src, []byte("\n")) + 1 // the end of file is on the last line
		blocks, err := ParseAll("f.conf", src)
		if err != nil {
			checkParseError(t, err, lines)
			return
		}
		names := make(map[string]bool)
		for _, b := range blocks {
			if names[b.Name] {
				t.Fatalf("ParseAll(): two blocks named %q", b.Name)
			}
			names[b.Name] = true
			checkBlock(t, b, lines)
		}
		b, err := Parse("f.conf", src)
		switch {
		case len(blocks) == 1 && (err != nil || b.Name != blocks[0].Name):
			t.Fatalf("Parse() = %v, %v; want the only block %q", b, err, blocks[0].Name)
		case len(blocks) != 1 && err == nil:
			t.Fatalf("Parse() = %v with %d blocks, want an error", b, len(blocks))
		case err != nil:
			checkParseError(t, err, lines)
		}
	})
}

// checkBlock checks a parsed block's invariants and that, unless two
// servers share an address, the library accepts its peers and can trace it.
func checkBlock(t *testing.T, b *Block, lines int) {
	t.Helper()
	if b.Name == "" || b.Line < 1 || b.Line > lines || len(b.Servers) == 0 {
		t.Fatalf("block %+v: bad block", b)
	}
	if _, ok := methodArgs[b.Method.Name]; b.Method.Name != "" && !ok || (b.Method.Name == "") != (b.Method.Line == 0) {
		t.Fatalf("block %+v: bad method", b)
	}
	primary := false
	for _, s := range b.Servers {
		switch {
		case s.Name == "" || s.Addr == "":
			t.Fatalf("server %+v: empty address", s)
		case s.Weight < 1 || s.MaxFails < 0 || s.MaxConns < 0 || s.FailTimeout < 0:
			t.Fatalf("server %+v: value out of range", s)
		case s.Line < b.Line || s.Line > lines:
			t.Fatalf("server %+v: line outside [%d, %d]", s, b.Line, lines)
		}
		primary = primary || !s.Backup
	}
	if !primary {
		t.Fatalf("block %+v: no primary server", b)
	}
	p, err := balancer.NewSmoothWRR(b.Peers(), fixed)
	if err != nil {
		t.Fatalf("NewSmoothWRR(%+v): %v", b, err)
	}
	if _, err := Trace(p, b.Name, 3, func(a string) bool { return a == b.Servers[0].Addr }); err != nil {
		t.Fatalf("Trace(%+v): %v", b, err)
	}
}

func checkParseError(t *testing.T, err error, lines int) {
	t.Helper()
	var pe *ParseError
	if !errors.As(err, &pe) {
		t.Fatalf("Parse() error %T %v, want *ParseError", err, err)
	}
	if pe.File != "f.conf" || pe.Line < 1 || pe.Line > lines || pe.Msg == "" {
		t.Fatalf("Parse() error %+v: want line in [1, %d]", pe, lines)
	}
	if want := fmt.Sprintf("f.conf:%d: %s", pe.Line, pe.Msg); err.Error() != want {
		t.Fatalf("Error() = %q, want %q", err.Error(), want)
	}
	known := false
	for _, s := range []error{ErrSyntax, ErrInvalidParam, ErrInvalidAddr, ErrNoServers, ErrNoUpstream, ErrManyUpstreams, balancer.ErrInvalidConfig} {
		known = known || errors.Is(err, s)
	}
	if !known {
		t.Fatalf("Parse() error %v wraps no known sentinel", err)
	}
}
