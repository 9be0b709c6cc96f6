package balancer_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/upstream"
)

// The files in testdata hold pick sequences recorded from real nginx (see
// testdata/README.md): one JSON case per line.
func TestConformanceSmooth(t *testing.T) {
	replayNginx(t, "testdata/nginx-1.22.1-smooth.jsonl", balancer.NewSmoothWRR)
}

func TestConformanceClassic(t *testing.T) {
	replayNginx(t, "testdata/nginx-1.2.0-classic.jsonl", balancer.NewClassicWRR)
}

// nginxCase is one recorded case. Servers are named a, b, c... in order, the
// upstream is named back, and a leading "dead" marks a server whose port
// refused every connection.
type nginxCase struct {
	Servers []string `json:"servers"`
	N       int      `json:"n"`
	Trace   []string `json:"trace"`
}

// block returns the case's upstream block and the set of dead servers.
func (c nginxCase) block() (string, map[string]bool) {
	var b strings.Builder
	dead := map[string]bool{}
	b.WriteString("upstream back {\n")
	for i, params := range c.Servers {
		addr := string(rune('a' + i))
		if rest, ok := strings.CutPrefix(params, "dead"); ok {
			dead[addr+":80"] = true // nginx logs `server a;` as a:80
			params = rest
		}
		fmt.Fprintf(&b, "    server %s %s;\n", addr, params)
	}
	b.WriteString("}\n")
	return b.String(), dead
}

// replayNginx replays every case of a vectors file through upstream.Parse,
// a picker from newPicker on a clock that never moves (nginx ran each case
// far inside every fail_timeout), and upstream.Trace.
func replayNginx[P balancer.Picker](t *testing.T, file string, newPicker func([]*balancer.Peer, ...balancer.Option) (P, error)) {
	f, err := os.Open(file)
	require.NoError(t, err)
	defer f.Close()
	clock := balancer.WithClock(func() time.Time { return time.Unix(1_700_000_000, 0) })
	sc := bufio.NewScanner(f)
	line := 0
	for sc.Scan() {
		line++
		var c nginxCase
		require.NoError(t, json.Unmarshal(sc.Bytes(), &c), "%s:%d", file, line)
		t.Run(fmt.Sprintf("%d:%s", line, strings.Join(c.Servers, "|")), func(t *testing.T) {
			src, dead := c.block()
			b, err := upstream.Parse(file, []byte(src))
			require.NoError(t, err)
			p, err := newPicker(b.Peers(), clock)
			require.NoError(t, err)
			got, err := upstream.Trace(p, b.Name, c.N, func(addr string) bool { return dead[addr] })
			require.NoError(t, err)
			for i := range got {
				got[i] = strings.ReplaceAll(got[i], ":80", "") // the vectors name servers by letter
			}
			assert.Equal(t, c.Trace, got, "trace of\n%s", src)
		})
	}
	require.NoError(t, sc.Err())
	require.Positive(t, line, "no cases in %s", file)
}
