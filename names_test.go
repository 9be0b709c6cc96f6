package balancer

import (
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// One meaning per name: Request.ClientAddr is the client, Peer.Addr the
// server; Request.SetKey is a request's key, HashText a peer's text on the
// ring. The deprecated names they replace must keep working as before,
// and nothing in the repository may still use them.

// TestDeprecatedNames_sameAsReplacement checks each deprecated name against
// its replacement on the same input, and against the value the
// replacement's doc states.
func TestDeprecatedNames_sameAsReplacement(t *testing.T) {
	a := netip.MustParseAddr("192.0.2.7")

	var r Request
	r.SetAddr(a) //lint:ignore SA1019 the deprecated name under test
	assert.Equal(t, a, r.ClientAddr(), "SetAddr sets what ClientAddr reads")
	r.SetClientAddr(netip.MustParseAddr("2001:db8::1"))
	assert.Equal(t, netip.MustParseAddr("2001:db8::1"), r.Addr(), "Addr reads what SetClientAddr set") //lint:ignore SA1019 under test
	r.Reset()
	assert.False(t, r.ClientAddr().IsValid(), "Reset clears the client address")

	for _, tt := range []struct {
		name, addr, text, want string
		opt                    func(string) PeerOption
	}{
		{"HashText", "10.0.0.1:80", "10.0.0.1", "10.0.0.1", HashText},
		{"HashKey", "10.0.0.1:80", "10.0.0.1", "10.0.0.1", HashKey}, //lint:ignore SA1019 under test
		{"default: the address", "10.0.0.1:80", "", "10.0.0.1:80", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var p *Peer
			if tt.opt == nil {
				p = NewPeer(tt.addr)
			} else {
				p = NewPeer(tt.addr, tt.opt(tt.text))
			}
			assert.Equal(t, tt.want, p.HashText())
			assert.Equal(t, tt.want, p.HashKey()) //lint:ignore SA1019 under test
			assert.Equal(t, tt.addr, p.Addr(), "the address is not the hash text")
			assert.Equal(t, p.Addr(), p.String(), "String prints the address")
		})
	}
	_, err := NewConsistentHash([]*Peer{NewPeer("a", HashKey(""))}) //lint:ignore SA1019 under test
	require.ErrorIs(t, err, ErrInvalidConfig, "an empty text is refused under the old name too")

	assert.Equal(t, 65536, MaxCycle, "the deprecated bound keeps its value, 2^16") //lint:ignore SA1019 under test

	var names []string
	for _, a := range Algorithms() {
		names = append(names, a.Name)
	}
	require.Greater(t, len(names), 1, "the registry's pickers")
	assert.Equal(t, strings.Join(names, ", "), AlgorithmNames(), "AlgorithmNames is Algorithms' names, comma-separated") //lint:ignore SA1019 under test
	_, err = AlgorithmNamed("nope")
	require.ErrorIs(t, err, ErrUnknownAlgorithm)
	assert.Contains(t, err.Error(), "(want one of "+strings.Join(names, ", ")+")", "the error lists the names")
}

// TestDeprecatedNames_sameRing builds one ConsistentHash ring with HashText
// and one with HashKey, each peer's text differing from its address, and
// expects every key to reach the same peer on both.
func TestDeprecatedNames_sameRing(t *testing.T) {
	build := func(opt func(string) PeerOption) *ConsistentHash {
		var peers []*Peer
		for _, s := range []string{"a", "b", "c", "d"} {
			peers = append(peers, NewPeer(s+".internal:80", opt(s)))
		}
		h, err := NewConsistentHash(peers)
		require.NoError(t, err)
		return h
	}
	byText, byKey := build(HashText), build(HashKey) //lint:ignore SA1019 under test
	seen := map[string]bool{}
	for k := range 200 {
		var r1, r2 Request
		key := "user-" + string(rune('a'+k%26)) + strings.Repeat("x", k/26)
		r1.SetKey(key)
		r2.SetKey(key)
		p1, err := byText.Pick(&r1)
		require.NoError(t, err)
		p2, err := byKey.Pick(&r2)
		require.NoError(t, err)
		assert.Equal(t, p1.Addr(), p2.Addr(), "key %q", key)
		seen[p1.Addr()] = true
		byText.Done(p1, Outcome{})
		byKey.Done(p2, Outcome{})
	}
	assert.Len(t, seen, 4, "200 keys over 4 peers reach every peer")
}

// TestDeprecatedNames_unused fails if a Go file or a guide of the
// repository (its nested modules included) uses a deprecated name outside
// its own definition and the tests above.
func TestDeprecatedNames_unused(t *testing.T) {
	uses := regexp.MustCompile(`\.SetAddr\(|\bHashKey\b|\bMaxCycle\b|\bRequest\.Addr\b|\bAlgorithmNames\b`)
	allowed := map[string]bool{
		"key.go":        true, // SetAddr, Addr
		"peer.go":       true, // HashKey
		"cycle.go":      true, // MaxCycle
		"registry.go":   true, // AlgorithmNames
		"names_test.go": true,
		"README.md":     true, // edited apart
		"CHANGELOG.md":  true, // lists the old names
	}
	scanRepo(t, "uses the deprecated", func(path string) *regexp.Regexp {
		if !strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, ".md") || allowed[path] {
			return nil
		}
		return uses
	})
}

// TestDeprecatedOptions_notCalledElsewhere fails if a Go file of another
// package of the repository (its nested modules included) calls one of the
// options a settings type replaced, or WithRetryBudget: those packages use
// the settings types (or their Option, for a picker built by name) and
// the retrybudget package. The root package's own tests still exercise the
// old names, which keep working for a release.
func TestDeprecatedOptions_notCalledElsewhere(t *testing.T) {
	calls := regexp.MustCompile(`\b(balancer|lbgo)\.(WithBand|WithExponent|WithFloor|WithTolerance|WithProber|WithProbeRate|WithProbePool|WithHotQuantile|WithBlackoutPeriod|WithWeightExpirationPeriod|WithWeightUpdatePeriod|WithErrorUtilizationPenalty|WithBoundedLoad|WithWarmup|WithRetryBudget)\(`)
	scanRepo(t, "calls the deprecated option", func(path string) *regexp.Regexp {
		if !strings.HasSuffix(path, ".go") || !strings.Contains(path, "/") {
			return nil // the root package's files
		}
		return calls
	})
}

// deprecatedDefaults matches the Default* constants that the settings
// types and the options' docs made redundant (defaults.go declares them).
var deprecatedDefaults = regexp.MustCompile(`\bDefault(Band|Decay|Exponent|FailTimeout|FailurePenalty|FastestDecay|Floor|HotQuantile|MaxFails|ProbeMaxAge|ProbePoolSize|ProbesPerPick|ProbesPerSecond|Tolerance|Weight)\b`)

// TestDeprecatedDefaults_unused fails if a Go file or a guide of the
// repository (its nested modules included) names one of the deprecated
// Default* constants outside their declarations and the tests that hold
// them to the documented values: code reads the value from
// internal/defaults (the root module) or from a peer or settings left at
// zero (the nested modules), and the docs state the value itself.
func TestDeprecatedDefaults_unused(t *testing.T) {
	allowed := map[string]bool{
		"defaults.go":      true, // the declarations
		"defaults_test.go": true, // each against its documented value
		"names_test.go":    true,
		"CHANGELOG.md":     true, // lists the old names
	}
	scanRepo(t, "names the deprecated", func(path string) *regexp.Regexp {
		if !strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, ".md") || allowed[path] {
			return nil
		}
		return deprecatedDefaults
	})
}

// TestDeprecatedBudgetNames_unused fails if a Go file or a guide of the
// repository (its nested modules included) uses one of the retry
// budget's names that package retrybudget replaced, or if a file of the
// root package uses one outside the deprecated declarations (retry_budget.go,
// RetryBudget.Do in do.go, WithRetryBudget's setting in options.go). The
// root package's own tests still exercise the old names, which keep
// working for a release.
func TestDeprecatedBudgetNames_unused(t *testing.T) {
	const names = `RetryBudget|NewRetryBudget|RetryBudgetStats|DefaultRetryRatio|DefaultRetryMinPerSecond|DefaultRetryWindow|MinRetryWindow|MaxRetryWindow|MaxRetryRatio|MaxRetryMinPerSecond|WithRetryBudget`
	qualified := regexp.MustCompile(`\b(balancer|lbgo)\.(` + names + `)\b|\.PickRetry\(|\bRetryBudget\.(Do|PickRetry)\b`)
	bare := regexp.MustCompile(`\b(` + names + `|PickRetry)\b`)
	allowed := map[string]bool{
		"retry_budget.go": true, // the deprecated declarations
		"do.go":           true, // RetryBudget.Do
		"options.go":      true, // WithRetryBudget's setting
		"CHANGELOG.md":    true, // lists the old names
	}
	scanRepo(t, "uses the deprecated retry budget name", func(path string) *regexp.Regexp {
		root := !strings.Contains(path, "/")
		isGo, isMd := strings.HasSuffix(path, ".go"), strings.HasSuffix(path, ".md")
		switch {
		case !isGo && !isMd || allowed[path] || root && strings.HasSuffix(path, "_test.go"):
			return nil
		case root && isGo:
			return bare
		}
		return qualified
	})
}

// scanRepo walks the repository's files (hidden directories and testdata
// skipped), checks each line of a file against the pattern check returns
// for its path (nil: the file is not checked) and reports every match as
// what the line does. It fails unless more than 100 files were checked,
// so that a walk gone wrong cannot pass.
func scanRepo(t *testing.T, does string, check func(path string) *regexp.Regexp) {
	t.Helper()
	var files int
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") && path != "." || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		re := check(path)
		if re == nil {
			return nil
		}
		files++
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			if m := re.FindString(line); m != "" {
				t.Errorf("%s:%d %s %s: %s", path, i+1, does, m, strings.TrimSpace(line))
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, files, 100, "the walk found the repository's files")
}
