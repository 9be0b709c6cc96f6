package main

import (
	"bytes"
	"regexp"
	"strconv"
	"testing"
)

// TestRun runs the example briefly: no RPC fails, the failing server is
// tried at most once per fail_timeout (1 s; the run is far shorter, so
// once, plus one per worker racing the first failure), and the slow one
// gets less than the fast one.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	failed, err := run(&out, 200)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if failed != 0 {
		t.Fatalf("%d RPCs failed", failed)
	}
	count := func(name string) (served, unavailable int) {
		m := regexp.MustCompile(regexp.QuoteMeta(name) + `.*served\s+(\d+)\s+answered UNAVAILABLE (\d+)`).FindStringSubmatch(out.String())
		if m == nil {
			t.Fatalf("no line for %q", name)
		}
		s, _ := strconv.Atoi(m[1])
		u, _ := strconv.Atoi(m[2])
		return s, u
	}
	fast, _ := count("fast")
	slow, _ := count("slow")
	_, bad := count("failing")
	if fast+slow != 200 {
		t.Errorf("fast %d + slow %d served, want 200", fast, slow)
	}
	if bad < 1 || bad > 1+4 {
		t.Errorf("the failing server answered %d attempts, want 1..5", bad)
	}
	if slow >= fast {
		t.Errorf("slow served %d, fast %d: want fewer on the slow one", slow, fast)
	}
}
