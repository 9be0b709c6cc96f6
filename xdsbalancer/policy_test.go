package xdsbalancer

import (
	"encoding/json"
	"errors"
	"testing"

	xdstypev3 "github.com/cncf/xds/go/xds/type/v3"
	"github.com/lbgo/balancer/grpcbalancer"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/structpb"
)

// TestPolicy checks the entry Policy makes against the wire form gRFC A52
// names: an xds.type.v3.TypedStruct in the extension's Any, its type_url
// ending in the policy's name, its value the config as a Struct, numbers
// as doubles.
func TestPolicy(t *testing.T) {
	maxFails := 3
	for _, tc := range []struct {
		name, policy string
		config       any
		want         map[string]any // the Struct's fields
	}{
		{"map", "lbgo_roundrobin", map[string]any{"maxFails": 3, "failTimeout": "1s"}, map[string]any{"maxFails": 3.0, "failTimeout": "1s"}},
		{"JSON text", "lbgo_hash", `{"hashHeader":"x-user","maxConns":2.0}`, map[string]any{"hashHeader": "x-user", "maxConns": 2.0}},
		{"bytes", "lbgo_smoothwrr", []byte(`{"failureCodes":["UNAVAILABLE",13]}`), map[string]any{"failureCodes": []any{"UNAVAILABLE", 13.0}}},
		{"RawMessage", "lbgo_leastconn", json.RawMessage(`{"reportedLoad":{"window":"1s","clients":4}}`), map[string]any{"reportedLoad": map[string]any{"window": "1s", "clients": 4.0}}},
		{"grpcbalancer.Config", "lbgo_randomtwo", grpcbalancer.Config{MaxFails: &maxFails}, map[string]any{"maxFails": 3.0}},
		{"nil", "lbgo_random", nil, map[string]any{}},
		{"empty JSON text", "lbgo_random", json.RawMessage(nil), map[string]any{}},
		{"blank JSON text", "lbgo_random", " \n", map[string]any{}},
		// Integers a double holds exactly, however written.
		{"exact integers", "lbgo_roundrobin", `{"maxConns":4611686018427387904,"maxFails":30e-1,"failTimeout":"1s","subset":{"algorithm":"random","size":0.3e1,"seed":1e15}}`, map[string]any{"maxConns": 4611686018427387904.0, "maxFails": 3.0, "failTimeout": "1s", "subset": map[string]any{"algorithm": "random", "size": 3.0, "seed": 1e15}}},
		// Not registered here: not checked, as a client may have it.
		{"unregistered", "someone_elses_policy", map[string]any{"maxFails": -1.5}, map[string]any{"maxFails": -1.5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Policy(tc.policy, tc.config)
			require.NoError(t, err)
			ext := p.GetTypedExtensionConfig()
			require.Equal(t, tc.policy, ext.GetName())
			require.Equal(t, "type.googleapis.com/xds.type.v3.TypedStruct", ext.GetTypedConfig().GetTypeUrl())
			var ts xdstypev3.TypedStruct
			require.NoError(t, ext.GetTypedConfig().UnmarshalTo(&ts))
			require.Equal(t, "type.googleapis.com/"+tc.policy, ts.GetTypeUrl())
			want, err := structpb.NewStruct(tc.want)
			require.NoError(t, err)
			require.Equal(t, want.AsMap(), ts.GetValue().AsMap())
		})
	}
}

// TestPolicy_refused: a name gRPC cannot read back, a config that is not
// one JSON object, a number a double cannot hold, and what a registered
// policy's parser refuses once the config has been through the Struct,
// each named.
func TestPolicy_refused(t *testing.T) {
	for _, tc := range []struct {
		policy  string
		config  any
		wantErr string
		parser  bool // the error wraps grpcbalancer.ErrBadConfig
	}{
		{"", nil, `xdsbalancer: bad load-balancing policy: name "": empty or with a /`, false},
		{"x/lbgo_hash", nil, `xdsbalancer: bad load-balancing policy: name "x/lbgo_hash": empty or with a /`, false},
		{"lbgo_hash", `[1]`, `xdsbalancer: bad load-balancing policy: lbgo_hash: config [1]: not a JSON object`, false},
		{"lbgo_hash", `{"a":1} {}`, `xdsbalancer: bad load-balancing policy: lbgo_hash: config {"a":1} {}: more than one JSON value`, false},
		{"lbgo_hash", `{`, `xdsbalancer: bad load-balancing policy: lbgo_hash: config {: unexpected EOF`, false},
		{"lbgo_hash", make(chan int), `xdsbalancer: bad load-balancing policy: lbgo_hash: config chan int: json: unsupported type: chan int`, false},
		{"lbgo_roundrobin", `{"maxConns":9007199254740993}`, `xdsbalancer: bad load-balancing policy: lbgo_roundrobin: maxConns 9007199254740993: not exact as a double (9007199254740992)`, false},
		// An integer written with a point or an exponent is an integer
		// too, and a fraction a double rounds to an integer is not one:
		// the client's parser would take the double's integer.
		{"lbgo_roundrobin", `{"maxConns":9007199254740993.0}`, `xdsbalancer: bad load-balancing policy: lbgo_roundrobin: maxConns 9007199254740993.0: not exact as a double (9007199254740992)`, false},
		{"lbgo_roundrobin", `{"maxConns":9007199254740993e0}`, `xdsbalancer: bad load-balancing policy: lbgo_roundrobin: maxConns 9007199254740993e0: not exact as a double (9007199254740992)`, false},
		{"lbgo_roundrobin", `{"subset":{"algorithm":"random","size":3.0000000000000000001}}`, `xdsbalancer: bad load-balancing policy: lbgo_roundrobin: subset.size 3.0000000000000000001: not exact as a double (3)`, false},
		{"lbgo_roundrobin", `{"maxConns":1e23}`, `xdsbalancer: bad load-balancing policy: lbgo_roundrobin: maxConns 1e23: not exact as a double (99999999999999991611392)`, false},
		{"lbgo_roundrobin", `{"probePool":{"size":1e400}}`, `xdsbalancer: bad load-balancing policy: lbgo_roundrobin: probePool.size 1e400: beyond a double`, false},
		{"lbgo_roundrobin", `{"maxFails":1,"maxFails":2}`, `xdsbalancer: bad load-balancing policy: lbgo_roundrobin: maxFails: given twice`, false},
		{"lbgo_roundrobin", `{"slowStart":{"window":"1s","window":"1s"}}`, `xdsbalancer: bad load-balancing policy: lbgo_roundrobin: slowStart.window: given twice`, false},
		{"other_policy", `{"a":{"b":1,"b":1}}`, `xdsbalancer: bad load-balancing policy: other_policy: a.b: given twice`, false},
		{"lbgo_fastestfirst", `{"band":1e-400}`, `xdsbalancer: bad load-balancing policy: lbgo_fastestfirst: band 1e-400: not zero, but a double rounds it to zero`, false},
		// The client's parser refuses a key that names no field, or one
		// only without regard to case.
		{"lbgo_roundrobin", `{"unknownField":1}`, `xdsbalancer: bad load-balancing policy: lbgo_roundrobin: grpcbalancer: bad load-balancing config: unknownField: no such field`, true},
		{"lbgo_roundrobin", `{"MAXFAILS":3}`, `xdsbalancer: bad load-balancing policy: lbgo_roundrobin: grpcbalancer: bad load-balancing config: MAXFAILS: no such field; the field is maxFails (names match exactly)`, true},
		{"lbgo_roundrobin", map[string]any{"maxFails": 3.5}, `xdsbalancer: bad load-balancing policy: lbgo_roundrobin: grpcbalancer: bad load-balancing config: maxFails 3.5: not an integer`, true},
		{"lbgo_roundrobin", `{"failTimeout":10}`, `xdsbalancer: bad load-balancing policy: lbgo_roundrobin: grpcbalancer: bad load-balancing config: failTimeout 10: not a string`, true},
		{"lbgo_roundrobin", `{"decay":"1s"}`, `xdsbalancer: bad load-balancing policy: lbgo_roundrobin: grpcbalancer: bad load-balancing config: decay "1s": not an option of RoundRobin`, true},
	} {
		t.Run(tc.wantErr, func(t *testing.T) {
			p, err := Policy(tc.policy, tc.config)
			require.Nil(t, p)
			require.ErrorIs(t, err, ErrBadPolicy)
			require.EqualError(t, err, tc.wantErr)
			require.Equal(t, tc.parser, errors.Is(err, grpcbalancer.ErrBadConfig))
		})
	}
}
