package grpcbalancer

import (
	"bytes"
	"encoding/json"
)

// MarshalJSON returns the JSON the config was parsed from ({} for none),
// which parses to the same config. gRPC's xDS policies need it: the
// cluster_impl policy marshals its child's parsed config and parses the
// JSON again before handing it down.
func (c *lbConfig) MarshalJSON() ([]byte, error) {
	if len(bytes.TrimSpace(c.js)) == 0 {
		return []byte("{}"), nil
	}
	var out bytes.Buffer
	if err := json.Compact(&out, c.js); err != nil {
		return nil, err // cannot happen: parseConfig parsed it
	}
	return out.Bytes(), nil
}
