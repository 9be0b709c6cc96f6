package grpcbalancer

import (
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	lbgo "github.com/lbgo/balancer"
	"github.com/lbgo/balancer/retrybudget"
)

// hedgeSC is a service config whose one methodConfig, for the health
// service, has the hedging policy hp.
func hedgeSC(hp string) string {
	return `{"methodConfig":[{"name":[{"service":"grpc.health.v1.Health"}],"hedgingPolicy":` + hp + `}]}`
}

// TestNewHedging_badConfig: each bad service config is refused with
// ErrBadHedgingConfig and a message naming the key (and the value where
// there is one), where encoding/json would ignore, fold or zero it.
func TestNewHedging_badConfig(t *testing.T) {
	for _, tc := range []struct {
		name, js string
		want     []string // substrings of the message
	}{
		{"not JSON", `{"methodConfig":`, []string{"unexpected end"}},
		{"unknown top-level key", `{"methodConfigs":[]}`, []string{"methodConfigs", "no such field"}},
		{"case-only top-level key", `{"MethodConfig":[]}`, []string{"MethodConfig", "methodConfig (names match exactly)"}},
		{"unknown key in a method config", `{"methodConfig":[{"name":[{}],"hedgePolicy":{}}]}`, []string{"methodConfig[0].hedgePolicy", "no such field"}},
		{"unknown key in the policy", hedgeSC(`{"maxAttempts":2,"hedgeDelay":"1s"}`), []string{"methodConfig[0].hedgingPolicy.hedgeDelay", "no such field"}},
		{"case-only key in the policy", hedgeSC(`{"MaxAttempts":2}`), []string{"hedgingPolicy.MaxAttempts", "maxAttempts (names match exactly)"}},
		{"duplicate key in the policy", hedgeSC(`{"maxAttempts":2,"maxAttempts":3}`), []string{"hedgingPolicy.maxAttempts", "given twice"}},
		{"duplicate key at the top", `{"methodConfig":[],"methodConfig":[]}`, []string{"methodConfig", "given twice"}},
		{"no maxAttempts", hedgeSC(`{"hedgingDelay":"1s"}`), []string{"methodConfig[0].hedgingPolicy", "no maxAttempts"}},
		{"maxAttempts 1", hedgeSC(`{"maxAttempts":1}`), []string{"hedgingPolicy.maxAttempts 1", "greater than 1"}},
		{"maxAttempts 0", hedgeSC(`{"maxAttempts":0}`), []string{"maxAttempts 0", "greater than 1"}},
		{"maxAttempts negative", hedgeSC(`{"maxAttempts":-3}`), []string{"maxAttempts -3", "greater than 1"}},
		{"maxAttempts fractional", hedgeSC(`{"maxAttempts":2.5}`), []string{"maxAttempts 2.5", "not an integer"}},
		{"maxAttempts a string", hedgeSC(`{"maxAttempts":"3"}`), []string{`maxAttempts "3"`, "not a number"}},
		{"maxAttempts beyond a double", hedgeSC(`{"maxAttempts":1e400}`), []string{"maxAttempts 1e400", "beyond a double"}},
		{"delay negative", hedgeSC(`{"maxAttempts":2,"hedgingDelay":"-1s"}`), []string{`hedgingDelay "-1s"`, "out of [0s, 3600s]"}},
		{"delay too long", hedgeSC(`{"maxAttempts":2,"hedgingDelay":"3601s"}`), []string{`hedgingDelay "3601s"`, "out of [0s, 3600s]"}},
		{"delay beyond a Duration", hedgeSC(`{"maxAttempts":2,"hedgingDelay":"99999999999s"}`), []string{`hedgingDelay "99999999999s"`, "out of"}},
		{"delay in ms", hedgeSC(`{"maxAttempts":2,"hedgingDelay":"10ms"}`), []string{`hedgingDelay "10ms"`, "not a duration in seconds"}},
		{"delay without unit", hedgeSC(`{"maxAttempts":2,"hedgingDelay":"1"}`), []string{`hedgingDelay "1"`, "not a duration"}},
		{"delay a number", hedgeSC(`{"maxAttempts":2,"hedgingDelay":1}`), []string{"hedgingDelay 1", "not a string"}},
		{"delay ten decimals", hedgeSC(`{"maxAttempts":2,"hedgingDelay":"0.0000000001s"}`), []string{"not a duration"}},
		{"unknown code name", hedgeSC(`{"maxAttempts":2,"nonFatalStatusCodes":["UNAVAILABLE","NOT_A_CODE"]}`), []string{`nonFatalStatusCodes[1] "NOT_A_CODE"`, "not a status code"}},
		{"code number out of range", hedgeSC(`{"maxAttempts":2,"nonFatalStatusCodes":[17]}`), []string{"nonFatalStatusCodes[0] 17", "not a status code"}},
		{"code OK", hedgeSC(`{"maxAttempts":2,"nonFatalStatusCodes":["OK"]}`), []string{`nonFatalStatusCodes[0] "OK"`, "cannot be non-fatal"}},
		{"codes not a list", hedgeSC(`{"maxAttempts":2,"nonFatalStatusCodes":"UNAVAILABLE"}`), []string{"nonFatalStatusCodes", "not a list"}},
		{"policy not an object", hedgeSC(`[2]`), []string{"hedgingPolicy", "not"}},
		{"retry and hedging", `{"methodConfig":[{"name":[{}],"hedgingPolicy":{"maxAttempts":2},"retryPolicy":{"maxAttempts":2}}]}`, []string{"methodConfig[0]", "both retryPolicy and hedgingPolicy"}},
		{"method without service", `{"methodConfig":[{"name":[{"method":"Check"}],"hedgingPolicy":{"maxAttempts":2}}]}`, []string{"methodConfig[0].name[0]", `"Check"`, "without a service"}},
		{"name twice", `{"methodConfig":[{"name":[{"service":"s"}]},{"name":[{"service":"s"}],"hedgingPolicy":{"maxAttempts":2}}]}`, []string{"methodConfig[1].name[0]", `service "s" named twice`}},
		{"unknown key in a name", `{"methodConfig":[{"name":[{"servce":"s"}]}]}`, []string{"methodConfig[0].name[0].servce", "no such field"}},
		{"service a number", `{"methodConfig":[{"name":[{"service":3}]}]}`, []string{"service", "not a string"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := NewHedging(tc.js)
			if err == nil {
				t.Fatalf("NewHedging(%s) = %v, nil; want an error", tc.js, h)
			}
			if !errors.Is(err, ErrBadHedgingConfig) {
				t.Errorf("error %q does not match ErrBadHedgingConfig", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
	for _, b := range []lbgo.Budget{nil, (*retrybudget.Budget)(nil)} {
		if _, err := NewHedging(hedgeSC(`{"maxAttempts":2}`), WithHedgeBudget(b)); !errors.Is(err, ErrBadHedgingConfig) || !strings.Contains(err.Error(), "WithHedgeBudget(nil)") {
			t.Errorf("WithHedgeBudget(%#v): %v", b, err)
		}
	}
}

// TestNewHedging_policies: the policy each method gets, found as grpc-go
// finds a method's config (the method, else its service, else the
// default), with the values derived by hand from the JSON.
func TestNewHedging_policies(t *testing.T) {
	js := `{
	  "loadBalancingConfig": [{"lbgo_random": {"maxFails": 0}}],
	  "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1},
	  "methodConfig": [
	    {"name": [{}], "hedgingPolicy": {"maxAttempts": 9, "hedgingDelay": "0.25s", "nonFatalStatusCodes": ["unavailable", 4]}},
	    {"name": [{"service": "a.S"}], "timeout": "1s", "hedgingPolicy": {"maxAttempts": 3.0}},
	    {"name": [{"service": "a.S", "method": "Plain"}], "retryPolicy": {"maxAttempts": 2}},
	    {"name": [{"service": "b.S", "method": "M"}], "waitForReady": true, "hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "3600s", "nonFatalStatusCodes": null}}
	  ]}`
	h, err := NewHedging(js)
	if err != nil {
		t.Fatal(err)
	}
	def := &hedgePolicy{maxAttempts: 5, delay: 250 * time.Millisecond, nonFatal: 1<<codes.Unavailable | 1<<codes.DeadlineExceeded}
	for _, tc := range []struct {
		method string
		want   *hedgePolicy
	}{
		{"/a.S/Get", &hedgePolicy{maxAttempts: 3}},
		{"/a.S/Plain", nil}, // its own config, without hedging, hides a.S's
		{"/b.S/M", &hedgePolicy{maxAttempts: 2, delay: time.Hour}},
		{"/b.S/Other", def},
		{"/c.S/M", def},
	} {
		got := h.policies.lookup(tc.method)
		switch {
		case got == nil && tc.want == nil:
		case got == nil || tc.want == nil || *got != *tc.want:
			t.Errorf("%s: policy %+v, want %+v", tc.method, got, tc.want)
		}
	}
	h, err = NewHedging(`{"loadBalancingConfig":[{"round_robin":{}}]}`)
	if err != nil {
		t.Fatal(err)
	}
	if p := h.policies.lookup("/a.S/M"); p != nil {
		t.Errorf("no methodConfig: policy %+v", p)
	}
}
