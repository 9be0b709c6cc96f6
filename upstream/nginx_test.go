package upstream

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lbgo/balancer/internal/testenv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// verdicts are nginx 1.22's verdicts on http-context text: whether
// `nginx -t` accepts it. Servers are IP addresses, which nginx does not
// resolve, and hash keys are variables nginx knows.
var verdicts = []struct {
	name   string
	http   string
	accept bool
}{
	{"no port", "upstream u { server 10.0.0.1; }", true},
	{"port 65535", "upstream u { server 10.0.0.1:65535; }", true},
	{"port 0", "upstream u { server 10.0.0.1:0; }", false},
	{"port 65536", "upstream u { server 10.0.0.1:65536; }", false},
	{"port not a number", "upstream u { server 10.0.0.1:abc; }", false},
	{"empty port", "upstream u { server 10.0.0.1:; }", false},
	{"leading zeros", "upstream u { server 010.0.0.1:080; }", true},
	{"scheme", "upstream u { server http://10.0.0.1; }", false},
	{"uri", "upstream u { server 10.0.0.1:80/x; }", false},
	{"no host", "upstream u { server :80; }", false},
	{"IPv6", "upstream u { server [::1]; server [::2]:8080; }", true},
	{"IPv6 bad", "upstream u { server [::g]; }", false},
	{"IPv6 without brackets", "upstream u { server ::1; }", false},
	{"unix", "upstream u { server unix:/tmp/a.sock; server UNIX:/tmp/b.sock; }", true},
	{"unix without path", "upstream u { server unix:; }", false},
	{"duplicate servers", "upstream u { server 10.0.0.1; server 10.0.0.1:80 weight=2; }", true},
	{"duplicate upstream", "upstream u { server 10.0.0.1; } upstream u { server 10.0.0.2; }", false},
	{"two upstreams and a server block", "upstream u { server 10.0.0.1; } upstream v { server 10.0.0.2; } server { listen 127.0.0.1:8080; location / { proxy_pass http://u; } }", true},
	{"backup only", "upstream u { server 10.0.0.1 backup; }", false},
	{"weight 0", "upstream u { server 10.0.0.1 weight=0; }", false},
	{"weight 0 with hash", "upstream u { hash $remote_addr; server 10.0.0.1 weight=0; }", false},
	{"weight 0 with hash consistent", "upstream u { hash $remote_addr consistent; server 10.0.0.1 weight=0; }", false},
	{"weight 0 with ip_hash", "upstream u { ip_hash; server 10.0.0.1 weight=0; }", false},
	{"weight 0 with random", "upstream u { random; server 10.0.0.1 weight=0; }", false},
	{"weight 0 with random two", "upstream u { random two; server 10.0.0.1 weight=0; }", false},
	{"hash", "upstream u { hash $remote_addr; server 10.0.0.1 weight=2 max_fails=3 fail_timeout=3s max_conns=3; server 10.0.0.2 down; }", true},
	{"hash consistent", "upstream u { hash $remote_addr consistent; server 10.0.0.1; }", true},
	{"hash CONSISTENT", "upstream u { hash $remote_addr CONSISTENT; server 10.0.0.1; }", false},
	{"hash without key", "upstream u { hash; server 10.0.0.1; }", false},
	{"hash with backup", "upstream u { hash $remote_addr; server 10.0.0.1; server 10.0.0.2 backup; }", false},
	{"backup before hash", "upstream u { server 10.0.0.1; server 10.0.0.2 backup; hash $remote_addr; }", true},
	{"ip_hash with weight and down", "upstream u { ip_hash; server 10.0.0.1 weight=3; server 10.0.0.2 down; }", true},
	{"ip_hash with backup", "upstream u { ip_hash; server 10.0.0.1; server 10.0.0.2 backup; }", false},
	{"ip_hash with an argument", "upstream u { ip_hash x; server 10.0.0.1; }", false},
	{"least_conn with backup", "upstream u { least_conn; server 10.0.0.1; server 10.0.0.2 backup; }", true},
	{"least_conn with an argument", "upstream u { least_conn x; server 10.0.0.1; }", false},
	{"random", "upstream u { random; server 10.0.0.1 weight=2; }", true},
	{"random two least_conn", "upstream u { random two least_conn; server 10.0.0.1; }", true},
	{"random least_conn", "upstream u { random least_conn; server 10.0.0.1; }", false},
	{"random two x", "upstream u { random two x; server 10.0.0.1; }", false},
	{"random with backup", "upstream u { random; server 10.0.0.1; server 10.0.0.2 backup; }", false},
	{"two methods", "upstream u { least_conn; ip_hash; server 10.0.0.1; }", true},
	{"backup after least_conn replaced by hash", "upstream u { least_conn; hash $remote_addr; server 10.0.0.1; server 10.0.0.2 backup; }", false},
}

// nginxConf wraps http-context text into a configuration nginx can test.
func nginxConf(http string) string {
	return "events {}\nhttp {\n" + http + "\n}\n"
}

// TestVerdicts checks that ParseAll accepts what nginx accepts and rejects
// what nginx rejects.
func TestVerdicts(t *testing.T) {
	for _, tt := range verdicts {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseAll("nginx.conf", []byte(nginxConf(tt.http)))
			if tt.accept {
				assert.NoError(t, err)
			} else {
				assert.Error(t, err)
			}
		})
	}
}

// TestVerdictsNginx confirms the verdicts table with the nginx binary,
// when there is one: `nginx -t` on each case.
func TestVerdictsNginx(t *testing.T) {
	bin, err := exec.LookPath("nginx")
	if err != nil {
		for _, dir := range []string{"/usr/sbin", "/usr/local/sbin", "/usr/local/nginx/sbin"} {
			if _, statErr := os.Stat(filepath.Join(dir, "nginx")); statErr == nil {
				bin, err = filepath.Join(dir, "nginx"), nil
				break
			}
		}
	}
	if err != nil {
		testenv.Missing(t, "no nginx binary: install nginx (Debian package nginx-core) to check the verdicts with nginx -t")
	}
	if testing.Short() {
		t.Skip("runs nginx -t once per case")
	}
	for _, tt := range verdicts {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, os.Mkdir(filepath.Join(dir, "logs"), 0o755))
			conf := filepath.Join(dir, "nginx.conf")
			head := "error_log stderr;\npid " + filepath.Join(dir, "nginx.pid") + ";\n"
			require.NoError(t, os.WriteFile(conf, []byte(head+nginxConf(tt.http)), 0o644))
			out, err := exec.Command(bin, "-t", "-q", "-p", dir, "-c", conf).CombinedOutput()
			var exitErr *exec.ExitError
			if err != nil && !errors.As(err, &exitErr) {
				t.Fatalf("nginx -t: %v", err)
			}
			accepted := err == nil
			assert.Equal(t, tt.accept, accepted, "nginx -t says:\n%s", strings.TrimSpace(string(out)))
		})
	}
}
