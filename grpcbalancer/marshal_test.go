package grpcbalancer

import (
	"encoding/json"
	"testing"

	"google.golang.org/grpc/balancer"
)

// TestParseConfig_marshalRoundTrip: a parsed config marshals to JSON that
// parses to the same config. gRPC's xDS policies need it: the cluster_impl
// policy above an xDS Cluster's policy marshals the child's parsed config
// and parses it again before handing it down, so a config that marshalled
// to anything else would reach the policy as another (before this, every
// field was lost: an lbgo_ policy chosen by xDS ran on its defaults).
func TestParseConfig_marshalRoundTrip(t *testing.T) {
	for _, tc := range []struct{ policy, json string }{
		{"lbgo_roundrobin", `{"maxFails":3,"failTimeout":"1h","maxConns":2,"failureCodes":["INTERNAL"]}`},
		{"lbgo_hash", `{"hashHeader":"x-user","maxFails":3.0}`},
		{"lbgo_fastestfirst", `{"decay":"200ms","band":2,"floor":5}`},
		{"lbgo_prequal", `{"probeTimeout":"100ms","probeWorkers":4,"probePool":{"size":8}}`},
		{"lbgo_smoothwrr", `{}`},
		{"lbgo_smoothwrr", ``},
	} {
		t.Run(tc.policy+tc.json, func(t *testing.T) {
			parser := balancer.Get(tc.policy).(balancer.ConfigParser)
			first, err := parser.ParseConfig([]byte(tc.json))
			if err != nil {
				t.Fatal(err)
			}
			js, err := json.Marshal(first)
			if err != nil {
				t.Fatal(err)
			}
			again, err := parser.ParseConfig(js)
			if err != nil {
				t.Fatalf("ParseConfig(%s), of the marshalled %s: %v", js, tc.json, err)
			}
			a, b := first.(*lbConfig), again.(*lbConfig)
			if a.maxFails != b.maxFails || a.failTimeout != b.failTimeout || a.maxConns != b.maxConns || a.failures != b.failures ||
				a.hashHeader != b.hashHeader || a.probe != b.probe || a.optsKey != b.optsKey || len(a.opts) != len(b.opts) {
				t.Fatalf("%s marshals to %s, which parses to\n%+v, not\n%+v", tc.json, js, b, a)
			}
		})
	}
}
