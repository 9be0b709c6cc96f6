package grpcbalancer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	lbgo "github.com/lbgo/balancer"
	"google.golang.org/grpc/attributes"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/experimental/balancer/weight"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/status"
)

// TestRegistered checks that every picker of the registry has a policy,

// TestParseConfig_optionsFollowDeclaration parses every picker option field,
// with a valid value, for every policy: a policy takes exactly the fields
// of the options its picker declares (Algorithm.Options; the field is the
// option's name less With, "decay" for WithDecay), and every option a
// picker declares but WithRand, which a policy does not offer, has its
// field.
func TestParseConfig_optionsFollowDeclaration(t *testing.T) {
	fields := map[string]string{
		"decay": `"1s"`, "failurePenalty": `"1s"`, "warmup": `"1s"`, "reportedLoad": `{"window":"1s"}`, "slowStart": `{"window":"30s"}`,
		"band": `1.5`, "exponent": `1`, "tolerance": `2`, "floor": `2`, "boundedLoad": `1.25`,
		"blackoutPeriod": `"0s"`, "weightExpirationPeriod": `"3m"`, "weightUpdatePeriod": `"100ms"`,
		"errorUtilizationPenalty": `0.5`,
		"probeRate":               `{"perPick":1,"perSecond":100}`, "probePool": `{"size":8,"maxAge":"500ms"}`, "hotQuantile": `0.84`,
	}
	for _, a := range lbgo.Algorithms() {
		for _, o := range a.Options {
			field := strings.ToLower(o[4:5]) + o[5:]
			// The policy gives its own WithRand and WithProber.
			if _, ok := fields[field]; !ok && o != "WithRand" && o != "WithProber" {
				t.Errorf("%s declares %s, which no config field sets", a.Name, o)
			}
		}
		for field, v := range fields {
			option := "With" + strings.ToUpper(field[:1]) + field[1:]
			_, err := parseConfig(a, []byte(`{"`+field+`":`+v+`}`))
			switch declared := slices.Contains(a.Options, option); {
			case declared && err != nil:
				t.Errorf("%s declares %s, but its policy refuses %s: %v", a.Name, option, field, err)
			case !declared && (err == nil || !strings.Contains(err.Error(), "not an option of "+a.Name)):
				t.Errorf("%s does not declare %s, but its policy's %s gives %v", a.Name, option, field, err)
			}
		}
	}
}

// named as the package doc says.
func TestRegistered(t *testing.T) {
	for _, a := range lbgo.Algorithms() {
		want := "lbgo_" + strings.ToLower(a.Name)
		if got := PolicyName(a.Name); got != want {
			t.Errorf("PolicyName(%q) = %q, want %q", a.Name, got, want)
		}
		b := balancer.Get(want)
		if b == nil {
			t.Errorf("policy %q is not registered", want)
			continue
		}
		if _, ok := b.(balancer.ConfigParser); !ok {
			t.Errorf("policy %q has no config parser", want)
		}
	}
}

func TestParseConfig(t *testing.T) {
	for _, tc := range []struct {
		policy, json string
		want         *lbConfig // checked fields: maxFails, failTimeout, maxConns, failures, hashHeader, len(opts)
		wantErr      string    // the message after the sentinel and the policy
	}{
		{policy: "lbgo_smoothwrr", json: ``, want: &lbConfig{maxFails: 1, failTimeout: 10 * time.Second, failures: defaultFailures}},
		{policy: "lbgo_smoothwrr", json: `{}`, want: &lbConfig{maxFails: 1, failTimeout: 10 * time.Second, failures: defaultFailures}},
		{policy: "lbgo_fastestfirst", json: `{"maxFails":3,"failTimeout":"0.5s","maxConns":7,"decay":"200ms","band":2,"floor":5}`,
			want: &lbConfig{maxFails: 3, failTimeout: 500 * time.Millisecond, maxConns: 7, failures: defaultFailures, opts: make([]lbgo.Option, 3)}},
		{policy: "lbgo_leastconn", json: `{"maxFails":0,"failureCodes":["UNAVAILABLE","INTERNAL",13]}`,
			want: &lbConfig{maxFails: 0, failTimeout: 10 * time.Second, failures: 1<<codes.Unavailable | 1<<codes.Internal}},
		{policy: "lbgo_leastconn", json: `{"failureCodes":[]}`, want: &lbConfig{maxFails: 1, failTimeout: 10 * time.Second}},
		{policy: "lbgo_hash", json: `{"hashHeader":"x-user"}`, want: &lbConfig{maxFails: 1, failTimeout: 10 * time.Second, failures: defaultFailures, hashHeader: "x-user"}},
		{policy: "lbgo_consistenthash", json: `{"boundedLoad":1.25}`, want: &lbConfig{maxFails: 1, failTimeout: 10 * time.Second, failures: defaultFailures, opts: make([]lbgo.Option, 1)}},
		{policy: "lbgo_randomweighted", json: `{"warmup":"30s"}`, want: &lbConfig{maxFails: 1, failTimeout: 10 * time.Second, failures: defaultFailures, opts: make([]lbgo.Option, 1)}},
		{policy: "lbgo_p2cpeakewma", json: `{"reportedLoad":{"window":"10s","clients":16},"decay":"1s"}`, want: &lbConfig{maxFails: 1, failTimeout: 10 * time.Second, failures: defaultFailures, opts: make([]lbgo.Option, 2)}},
		// An integer field takes a number written with a fraction or an
		// exponent whose value is an integer, as it arrives from an xDS
		// control plane (a google.protobuf.Struct holds every number as a
		// double) or from any JSON writer that writes 3 as 3.0.
		{policy: "lbgo_smoothwrr", json: `{"maxFails":3.0,"maxConns":7e0,"failureCodes":[14.0]}`, want: &lbConfig{maxFails: 3, failTimeout: 10 * time.Second, maxConns: 7, failures: 1 << codes.Unavailable}},
		{policy: "lbgo_smoothwrr", json: `{"maxFails":-0.0}`, want: &lbConfig{maxFails: 0, failTimeout: 10 * time.Second, failures: defaultFailures}},
		{policy: "lbgo_smoothwrr", json: `{"maxFails":0.02E2,"maxConns":1500e-2}`, want: &lbConfig{maxFails: 2, failTimeout: 10 * time.Second, maxConns: 15, failures: defaultFailures}},
		{policy: "lbgo_leastconn", json: `{"reportedLoad":{"window":"1s","clients":2.0}}`, want: &lbConfig{maxFails: 1, failTimeout: 10 * time.Second, failures: defaultFailures, opts: make([]lbgo.Option, 1)}},
		{policy: "lbgo_prequal", json: `{"probePool":{"size":8.000},"probeWorkers":4.0,"floor":1}`, wantErr: `floor 1: not an option of Prequal`},
		{policy: "lbgo_prequal", json: `{"probePool":{"size":8.000},"probeWorkers":4.0}`, want: &lbConfig{maxFails: 1, failTimeout: 10 * time.Second, failures: defaultFailures, opts: make([]lbgo.Option, 1)}},
		{policy: "lbgo_fastestfirst", json: `{"floor":5.0,"band":2.0}`, want: &lbConfig{maxFails: 1, failTimeout: 10 * time.Second, failures: defaultFailures, opts: make([]lbgo.Option, 2)}},
		// A string stays as it is, escaped quotes and all.
		{policy: "lbgo_hash", json: `{"hashHeader":"3.0"}`, want: &lbConfig{maxFails: 1, failTimeout: 10 * time.Second, failures: defaultFailures, hashHeader: "3.0"}},
		{policy: "lbgo_hash", json: `{"hashHeader":"x\"1.0\\","maxFails":2.0}`, want: &lbConfig{maxFails: 2, failTimeout: 10 * time.Second, failures: defaultFailures, hashHeader: `x"1.0\`}},
		{policy: "lbgo_smoothwrr", json: `{"slowStart":{"window":"30s","aggression":1.5,"minWeightPercent":20}}`, want: &lbConfig{maxFails: 1, failTimeout: 10 * time.Second, failures: defaultFailures, opts: make([]lbgo.Option, 1)}},

		// The message after "grpcbalancer: bad load-balancing config: "
		// names the field as the JSON spells it, the value as written and
		// what is wrong, nothing else (gRPC's message names the policy).
		{policy: "lbgo_smoothwrr", json: `{"maxFails":-1}`, wantErr: `maxFails -1: negative`},
		{policy: "lbgo_smoothwrr", json: `{"maxConns":-2}`, wantErr: `maxConns -2: negative`},
		// encoding/json would take a key that names a field only without
		// regard to case, ignore one that names none, keep the last of a
		// repeated key and read 1e-400 as 0: each is refused, naming it.
		{policy: "lbgo_smoothwrr", json: `{"MAXFAILS":-1}`, wantErr: `MAXFAILS: no such field; the field is maxFails (names match exactly)`},
		{policy: "lbgo_smoothwrr", json: `{"MAXFAILS":3}`, wantErr: `MAXFAILS: no such field; the field is maxFails (names match exactly)`},
		{policy: "lbgo_fastestfirst", json: `{"Band":0.5}`, wantErr: `Band: no such field; the field is band (names match exactly)`},
		{policy: "lbgo_smoothwrr", json: `{"FailTimeout":5}`, wantErr: `FailTimeout: no such field; the field is failTimeout (names match exactly)`},
		{policy: "lbgo_smoothwrr", json: `{"unknownField":1}`, wantErr: `unknownField: no such field`},
		{policy: "lbgo_fastestfirst", json: `{"maxFails":3,"decay":"1s","unknownField":true}`, wantErr: `unknownField: no such field`},
		{policy: "lbgo_smoothwrr", json: `{"maxFails":1,"maxFails":2}`, wantErr: `maxFails: given twice`},
		{policy: "lbgo_fastestfirst", json: `{"band":1e-400}`, wantErr: `band 1e-400: not zero, but a double rounds it to zero`},
		{policy: "lbgo_fastestfirst", json: `{"band":1e400}`, wantErr: `band 1e400: beyond a double's range`},
		{policy: "lbgo_leastconn", json: `{"reportedLoad":{"window":"1s","Clients":2}}`, wantErr: `reportedLoad.Clients: no such field; the field is clients (names match exactly)`},
		{policy: "lbgo_smoothwrr", json: `{"slowStart":{"window":"1s","window":"2s"}}`, wantErr: `slowStart.window: given twice`},
		{policy: "lbgo_smoothwrr", json: `{"subset":{"algorithm":"ring","clientIndex":0,"clientCount":2,"size":1,"seeds":3}}`, wantErr: `subset.seeds: no such field`},
		{policy: "lbgo_smoothwrr", json: `{"failTimeout":"soon"}`, wantErr: `failTimeout "soon": not a duration`},
		{policy: "lbgo_smoothwrr", json: `{"failTimeout":"-1s"}`, wantErr: `failTimeout "-1s": negative`},
		{policy: "lbgo_smoothwrr", json: `{"failTimeout":5}`, wantErr: `failTimeout 5: not a string`},
		{policy: "lbgo_smoothwrr", json: `{"maxFails":"1"}`, wantErr: `maxFails "1": not an integer`},
		{policy: "lbgo_smoothwrr", json: `{"maxFails":1.5}`, wantErr: `maxFails 1.5: not an integer`},
		// A number that is not an integer as written stays refused, named as
		// written: a fraction, a fraction hidden by an exponent, digits a
		// double would round away, and integers beyond a double's 2^53.
		{policy: "lbgo_smoothwrr", json: `{"maxFails":3.5}`, wantErr: `maxFails 3.5: not an integer`},
		{policy: "lbgo_smoothwrr", json: `{"maxFails":35e-1}`, wantErr: `maxFails 35e-1: not an integer`},
		{policy: "lbgo_smoothwrr", json: `{"maxFails":3.0000000000000000001}`, wantErr: `maxFails 3.0000000000000000001: not an integer`},
		{policy: "lbgo_smoothwrr", json: `{"maxFails":1e-999999999}`, wantErr: `maxFails 1e-999999999: not zero, but a double rounds it to zero`},
		{policy: "lbgo_smoothwrr", json: `{"maxConns":1e300}`, wantErr: `maxConns 1e300: not an integer`},
		{policy: "lbgo_leastconn", json: `{"reportedLoad":{"window":"1s","clients":2.5}}`, wantErr: `reportedLoad {"window":"1s","clients":2.5}: clients not an integer`},
		{policy: "lbgo_smoothwrr", json: `{"band":"wide"}`, wantErr: `band "wide": not a number`},
		{policy: "lbgo_smoothwrr", json: `{"failureCodes":"UNAVAILABLE"}`, wantErr: `failureCodes "UNAVAILABLE": not a list`},
		{policy: "lbgo_smoothwrr", json: `[1]`, wantErr: `[1]: not a JSON object`},
		{policy: "lbgo_smoothwrr", json: `{`, wantErr: `unexpected end of JSON input`},
		{policy: "lbgo_smoothwrr", json: `{"decay":"1s"}`, wantErr: `decay "1s": not an option of SmoothWRR`},
		{policy: "lbgo_smoothwrr", json: `{"hashHeader":"x-user"}`, wantErr: `hashHeader "x-user": the picker SmoothWRR does not route by key`},
		{policy: "lbgo_smoothwrr", json: `{"failureCodes":["OK"]}`, wantErr: `failureCodes "OK": cannot count as a failure`},
		{policy: "lbgo_smoothwrr", json: `{"failureCodes":["UNAVAILABLE","NOT_A_CODE"]}`, wantErr: `failureCodes "NOT_A_CODE": not a status code`},
		{policy: "lbgo_smoothwrr", json: `{"failureCodes":[14, 99]}`, wantErr: `failureCodes 99: not a status code`},
		{policy: "lbgo_fastestfirst", json: `{"decay":"0s"}`, wantErr: `decay "0s": not positive`},
		{policy: "lbgo_fastestfirst", json: `{"failurePenalty":"-1s"}`, wantErr: `failurePenalty "-1s": not positive`},
		{policy: "lbgo_fastestfirst", json: `{"band":0.5}`, wantErr: `band 0.5: out of (1, 16]`},
		{policy: "lbgo_fastestfirst", json: `{"band":2, "floor":1000}`, wantErr: `floor 1000: out of [1, 100]`},
		{policy: "lbgo_consistenthash", json: `{"boundedLoad":0.5}`, wantErr: `boundedLoad 0.5: the factor must be finite and at least 1`},
		{policy: "lbgo_leastconn", json: `{"warmup":"1s"}`, wantErr: `warmup "1s": not an option of LeastConn`},
		{policy: "lbgo_randomweighted", json: `{"warmup":"-1s"}`, wantErr: `warmup "-1s": negative`},
		{policy: "lbgo_leastconn", json: `{"reportedLoad":{"window":"0s"}}`, wantErr: `reportedLoad {"window":"0s"}: window not positive`},
		{policy: "lbgo_leastconn", json: `{"reportedLoad":{"window":"1s","clients":0}}`, wantErr: `reportedLoad {"window":"1s","clients":0}: clients out of [1, 1048576]`},
		{policy: "lbgo_fastestfirst", json: `{"reportedLoad":{"clients":4}}`, wantErr: `reportedLoad {"clients":4}: no window`},
		{policy: "lbgo_p2cpeakewma", json: `{"reportedLoad":{"window":"soon"}}`, wantErr: `reportedLoad {"window":"soon"}: not a duration`},
		{policy: "lbgo_smoothwrr", json: `{"reportedLoad":{"window":"1s"}}`, wantErr: `reportedLoad {"window":"1s"}: not an option of SmoothWRR`},
		{policy: "lbgo_randomtwo", json: `{"reportedLoad":"1s"}`, wantErr: `reportedLoad "1s": not an object`},
		{policy: "lbgo_smoothwrr", json: `{"slowStart":{"aggression":2}}`, wantErr: `slowStart {"aggression":2}: no window`},
		{policy: "lbgo_leastconn", json: `{"slowStart":{"window":"-1s"}}`, wantErr: `slowStart {"window":"-1s"}: window -1s is not positive`},
		{policy: "lbgo_random", json: `{"slowStart":{"window":"10s","aggression":0}}`, wantErr: `slowStart {"window":"10s","aggression":0}: aggression 0 is not positive and finite`},
		{policy: "lbgo_p2cpeakewma", json: `{"slowStart":{"window":"10s","minWeightPercent":101}}`, wantErr: `slowStart {"window":"10s","minWeightPercent":101}: minWeightPercent 101 is outside [0, 100]`},
		{policy: "lbgo_hash", json: `{"slowStart":{"window":"10s"}}`, wantErr: `slowStart {"window":"10s"}: not an option of Hash`},
	} {
		t.Run(tc.policy+tc.json, func(t *testing.T) {
			parser := balancer.Get(tc.policy).(balancer.ConfigParser)
			got, err := parser.ParseConfig([]byte(tc.json))
			if tc.wantErr != "" {
				want := ErrBadConfig.Error() + ": " + tc.wantErr
				if !errors.Is(err, ErrBadConfig) || err.Error() != want {
					t.Fatalf("ParseConfig(%s) = %v, want ErrBadConfig saying\n%s", tc.json, err, want)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseConfig(%s): %v", tc.json, err)
			}
			c := got.(*lbConfig)
			if c.maxFails != tc.want.maxFails || c.failTimeout != tc.want.failTimeout || c.maxConns != tc.want.maxConns ||
				c.failures != tc.want.failures || c.hashHeader != tc.want.hashHeader || len(c.opts) != len(tc.want.opts) {
				t.Fatalf("ParseConfig(%s) = %+v, want %+v", tc.json, c, tc.want)
			}
		})
	}
}

func TestWeightAttribute(t *testing.T) {
	plain := resolver.Address{Addr: "127.0.0.1:1"}
	other := resolver.Address{Addr: "127.0.0.1:2", BalancerAttributes: attributes.New("other", 1)}
	for _, tc := range []struct {
		name string
		ep   resolver.Endpoint
		want int
	}{
		{"no attribute", resolver.Endpoint{Addresses: []resolver.Address{plain}}, 1},
		{"address weight", resolver.Endpoint{Addresses: []resolver.Address{WithWeight(plain, 5)}}, 5},
		{"address weight among other attributes", resolver.Endpoint{Addresses: []resolver.Address{WithWeight(other, 7)}}, 7},
		{"weight 0", resolver.Endpoint{Addresses: []resolver.Address{WithWeight(plain, 0)}}, 0},
		{"endpoint weight wins", WithEndpointWeight(resolver.Endpoint{Addresses: []resolver.Address{WithWeight(plain, 5)}}, 3), 3},
		// gRPC moves an address's balancer attributes to its endpoint.
		{"moved to the endpoint", resolver.Endpoint{Addresses: []resolver.Address{plain}, Attributes: WithWeight(plain, 4).BalancerAttributes}, 4},
		// gRPC's own endpoint weight, which its xDS resolver sets from
		// EDS (an endpoint's load_balancing_weight, scaled with its
		// locality's), counts where ours is not set.
		{"gRPC's weight", weight.Set(resolver.Endpoint{Addresses: []resolver.Address{plain}}, weight.EndpointInfo{Weight: 21845}), 21845},
		{"gRPC's weight 0 is none", weight.Set(resolver.Endpoint{Addresses: []resolver.Address{plain}}, weight.EndpointInfo{}), 1},
		{"endpoint weight wins over gRPC's", weight.Set(WithEndpointWeight(resolver.Endpoint{Addresses: []resolver.Address{plain}}, 3), weight.EndpointInfo{Weight: 9}), 3},
		{"address weight wins over gRPC's", weight.Set(resolver.Endpoint{Addresses: []resolver.Address{WithWeight(plain, 5)}}, weight.EndpointInfo{Weight: 9}), 5},
	} {
		if got := weightOf(tc.ep); got != tc.want {
			t.Errorf("%s: weight %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestOutcomeOf(t *testing.T) {
	live := context.Background()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Unix(1, 0))
	defer cancel2()
	superseded, cancel3 := context.WithCancelCause(context.Background())
	cancel3(lbgo.ErrSuperseded)                       // a hedged RPC's loser
	stream, cancel4 := context.WithCancel(superseded) // gRPC's attempt context under it
	defer cancel4()
	unavailable := status.Error(codes.Unavailable, "down")
	deadline := status.Error(codes.DeadlineExceeded, "slow")
	isFailure := defaultFailures.has
	const lat = 7 * time.Millisecond
	for _, tc := range []struct {
		name string
		ctx  context.Context
		info balancer.DoneInfo
		want lbgo.Outcome
	}{
		{"success", live, balancer.DoneInfo{BytesSent: true, BytesReceived: true}, lbgo.Outcome{Latency: lat}},
		{"transport not ready, picked again", live, balancer.DoneInfo{}, lbgo.Outcome{Abandoned: true, Latency: lat}},
		{"server unavailable", live, balancer.DoneInfo{Err: unavailable, BytesSent: true}, lbgo.Outcome{Failed: true, Latency: lat}},
		{"server deadline, client still waiting", live, balancer.DoneInfo{Err: deadline, BytesSent: true}, lbgo.Outcome{Failed: true, Latency: lat}},
		{"client deadline", expired, balancer.DoneInfo{Err: deadline, BytesSent: true}, lbgo.Outcome{Abandoned: true, Latency: lat}},
		{"client cancel", cancelled, balancer.DoneInfo{Err: status.Error(codes.Canceled, "x"), BytesSent: true}, lbgo.Outcome{Abandoned: true, Latency: lat}},
		{"cancelled status, live ctx", live, balancer.DoneInfo{Err: status.Error(codes.Canceled, "x"), BytesSent: true}, lbgo.Outcome{Abandoned: true, Latency: lat}},
		{"hedge's loser", superseded, balancer.DoneInfo{Err: status.Error(codes.Canceled, "x"), BytesSent: true}, lbgo.Outcome{Abandoned: true, Superseded: true, Latency: lat}},
		{"hedge's loser, the attempt's own context", stream, balancer.DoneInfo{Err: status.Error(codes.Canceled, "x"), BytesSent: true}, lbgo.Outcome{Abandoned: true, Superseded: true, Latency: lat}},
		{"hedge's loser, the server's failure first", superseded, balancer.DoneInfo{Err: unavailable, BytesSent: true}, lbgo.Outcome{Failed: true, Latency: lat}},
		{"hedge's loser, the server's failure first, the attempt's own context", stream, balancer.DoneInfo{Err: unavailable, BytesSent: true}, lbgo.Outcome{Failed: true, Latency: lat}},
		{"hedge's loser, an application error first", superseded, balancer.DoneInfo{Err: status.Error(codes.NotFound, "x"), BytesSent: true}, lbgo.Outcome{Latency: lat}},
		{"hedge's loser, internal first (not a failure by default)", stream, balancer.DoneInfo{Err: status.Error(codes.Internal, "x"), BytesSent: true}, lbgo.Outcome{Latency: lat}},
		{"hedge's loser, deadline status", superseded, balancer.DoneInfo{Err: deadline, BytesSent: true}, lbgo.Outcome{Abandoned: true, Superseded: true, Latency: lat}},
		{"client cancel, the server's failure first", cancelled, balancer.DoneInfo{Err: unavailable, BytesSent: true}, lbgo.Outcome{Failed: true, Latency: lat}},
		{"client deadline, the server's failure first", expired, balancer.DoneInfo{Err: unavailable, BytesSent: true}, lbgo.Outcome{Failed: true, Latency: lat}},
		{"client cancel, an application error first", cancelled, balancer.DoneInfo{Err: status.Error(codes.NotFound, "x"), BytesSent: true}, lbgo.Outcome{Latency: lat}},
		{"client cancel, deadline status", cancelled, balancer.DoneInfo{Err: deadline, BytesSent: true}, lbgo.Outcome{Abandoned: true, Latency: lat}},
		{"hedge's loser, never sent", superseded, balancer.DoneInfo{Err: unavailable}, lbgo.Outcome{Abandoned: true, Superseded: true, Latency: lat}},
		{"never sent", live, balancer.DoneInfo{Err: unavailable}, lbgo.Outcome{Abandoned: true, Latency: lat}},
		{"application error", live, balancer.DoneInfo{Err: status.Error(codes.NotFound, "x"), BytesSent: true}, lbgo.Outcome{Latency: lat}},
		{"internal, not listed by default", live, balancer.DoneInfo{Err: status.Error(codes.Internal, "x"), BytesSent: true}, lbgo.Outcome{Latency: lat}},
	} {
		if got := OutcomeOf(tc.ctx, tc.info, lat, isFailure); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
	if got := OutcomeOf(live, balancer.DoneInfo{}, -time.Second, isFailure); got.Latency != 0 {
		t.Errorf("negative latency reported as %v, want 0", got.Latency)
	}
}

// TestREADME_optionFields holds the README's config table to the
// pickers' declarations: the row of each picker option field names the
// pickers that declare its option (Algorithm.Options), in the registry's
// order.
func TestREADME_optionFields(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := 0
	for _, line := range strings.Split(string(b), "\n") {
		cells := strings.Split(strings.Trim(line, "| "), "|")
		if len(cells) != 4 {
			continue
		}
		var fields []string
		for _, f := range strings.Split(cells[0], ",") {
			fields = append(fields, strings.Trim(strings.TrimSpace(f), "`"))
		}
		for _, field := range fields {
			if !slices.Contains([]string{"decay", "failurePenalty", "band", "exponent", "tolerance", "floor", "warmup", "boundedLoad", "reportedLoad", "slowStart", "probeRate", "probePool", "hotQuantile"}, field) {
				continue
			}
			rows++
			var want []string
			for _, a := range lbgo.Algorithms() {
				if slices.Contains(a.Options, optionOf(field)) {
					want = append(want, a.Name)
				}
			}
			if got := strings.TrimSpace(cells[2]); got != strings.Join(want, ", ") {
				t.Errorf("README: %s is taken by %q, the declarations say %q", field, got, strings.Join(want, ", "))
			}
		}
	}
	if rows != 13 {
		t.Errorf("README: %d picker option fields in the config table, want 13", rows)
	}
}

// TestParseConfig_optsKeyFollowsEveryOption changes each picker option field
// of every policy between two valid values: the policy's options key, which
// decides whether a config change rebuilds the picker, must change with it
// and stay put when the value does.
func TestParseConfig_optsKeyFollowsEveryOption(t *testing.T) {
	values := map[string][2]string{
		"decay": {`"1s"`, `"2s"`}, "failurePenalty": {`"1s"`, `"2s"`}, "warmup": {`"1s"`, `"2s"`}, "reportedLoad": {`{"window":"1s"}`, `{"window":"1s","clients":16}`},
		"hotQuantile": {`0.6`, `0.84`}, "slowStart": {`{"window":"30s"}`, `{"window":"30s","aggression":2}`},
		"band": {`1.5`, `2`}, "exponent": {`1`, `2`}, "tolerance": {`2`, `3`}, "floor": {`2`, `3`}, "boundedLoad": {`1.25`, `1.5`},
		"blackoutPeriod": {`"0s"`, `"10s"`}, "weightExpirationPeriod": {`"3m"`, `"5s"`},
		"weightUpdatePeriod": {`"100ms"`, `"1s"`}, "errorUtilizationPenalty": {`0.5`, `1`},
		"probeRate": {`{"perPick":1}`, `{"perPick":1,"perSecond":10}`}, "probePool": {`{"size":8}`, `{"size":8,"maxAge":"2s"}`},
	}
	key := func(a lbgo.Algorithm, js string) string {
		t.Helper()
		c, err := parseConfig(a, []byte(js))
		if err != nil {
			t.Fatalf("%s %s: %v", a.Name, js, err)
		}
		return c.optsKey
	}
	for _, a := range lbgo.Algorithms() {
		none := key(a, `{}`)
		for field, v := range values {
			if !slices.Contains(a.Options, "With"+strings.ToUpper(field[:1])+field[1:]) {
				continue
			}
			one, again, two := key(a, `{"`+field+`":`+v[0]+`}`), key(a, `{"`+field+`":`+v[0]+`}`), key(a, `{"`+field+`":`+v[1]+`}`)
			if one == two || one == none {
				t.Errorf("%s: %s %s and %s give keys %q, %q (none: %q)", a.Name, field, v[0], v[1], one, two, none)
			}
			if one != again {
				t.Errorf("%s: %s %s gives keys %q then %q", a.Name, field, v[0], one, again)
			}
		}
	}
}

// TestWeightsOf: gRPC's own endpoint weights become small integers: since
// gRFC A113 gRPC's xds resolver gives them as shares in 1.31 fixed point,
// floor(w·2^31/S) for EDS weight w of a locality's sum S, about 2^31 in
// all, past nginx's hash (a 15-bit hash modulo the total) and
// ConsistentHash's ring. Equal ones become 1; small ones stay; others
// become their share of 1000, rounded, at least 1. Ours stay.
func TestWeightsOf(t *testing.T) {
	ep := func(i int) resolver.Endpoint {
		return resolver.Endpoint{Addresses: []resolver.Address{{Addr: fmt.Sprintf("127.0.0.1:%d", i+1)}}}
	}
	grpcs := func(ws ...uint32) []resolver.Endpoint {
		var eps []resolver.Endpoint
		for i, w := range ws {
			eps = append(eps, weight.Set(ep(i), weight.EndpointInfo{Weight: w}))
		}
		return eps
	}
	share := func(w, sum uint64) uint32 { return uint32(w << 31 / sum) }
	for _, tc := range []struct {
		name string
		eps  []resolver.Endpoint
		want []int
	}{
		{"small: as they are", grpcs(1, 2, 3), []int{1, 2, 3}},
		{"small, 1000 in all: as they are", grpcs(400, 600), []int{400, 600}},
		// 357913941, 715827882, 1073741824 of 2^31-1: 166.7, 333.3, 500.0
		// of 1000.
		{"EDS 1, 2, 3 as A113 shares", grpcs(share(1, 6), share(2, 6), share(3, 6)), []int{167, 333, 500}},
		{"EDS 1, 1, 1 as A113 shares", grpcs(share(1, 3), share(1, 3), share(1, 3)), []int{1, 1, 1}},
		{"one endpoint", grpcs(1 << 31), []int{1}},
		{"a tiny one stays 1", grpcs(1<<32-1, 1), []int{1000, 1}},
		{"ours stay", append(grpcs(1<<30, 1<<29), WithEndpointWeight(ep(2), 1<<29)), []int{667, 333, 1 << 29}},
	} {
		if got := weightsOf(tc.eps); !slices.Equal(got, tc.want) {
			t.Errorf("%s: weights %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestParseConfig_exponentZero: "exponent": 0 still means weights that
// ignore latency, though a zero field of balancer.FastestFirstSettings is
// its default. a answers in 10 ms and b in 100 ms, once each: b's derived
// weight is 100 × (3·10/100)^α, 9 at α = 2 (the default, and "exponent":
// 2), 100 at α = 0.
func TestParseConfig_exponentZero(t *testing.T) {
	alg, err := lbgo.AlgorithmNamed("FastestFirst")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		json  string
		wantB int
	}{
		{`{}`, 9},
		{`{"exponent":2}`, 9},
		{`{"exponent":0}`, 100},
	} {
		cfg, err := parseConfig(alg, []byte(tt.json))
		if err != nil {
			t.Fatalf("%s: %v", tt.json, err)
		}
		now := time.Unix(1000, 0)
		a, b := lbgo.NewPeer("a"), lbgo.NewPeer("b")
		p, err := alg.New([]*lbgo.Peer{a, b}, append(slices.Clone(cfg.opts), lbgo.WithClock(func() time.Time { return now }))...)
		if err != nil {
			t.Fatalf("%s: %v", tt.json, err)
		}
		latency := map[*lbgo.Peer]time.Duration{a: 10 * time.Millisecond, b: 100 * time.Millisecond}
		for range 2 {
			peer, err := p.Pick(nil)
			if err != nil {
				t.Fatal(err)
			}
			now = now.Add(latency[peer])
			if err := p.Done(peer, lbgo.Outcome{Latency: latency[peer]}); err != nil {
				t.Fatal(err)
			}
		}
		if got := [2]int{a.Stats().DerivedWeight, b.Stats().DerivedWeight}; got != [2]int{100, tt.wantB} {
			t.Errorf("%s: derived weights a, b %v, want [100 %d]", tt.json, got, tt.wantB)
		}
	}
}
