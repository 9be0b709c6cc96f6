package strictjson

import (
	"encoding/json"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type inner struct {
	Window  *string `json:"window,omitempty"`
	Clients *int    `json:"clients,omitempty"`
}

type shape struct {
	MaxFails *int        `json:"maxFails,omitempty"`
	Band     *float64    `json:"band,omitempty"`
	Inner    *inner      `json:"inner,omitempty"`
	List     []inner     `json:"list,omitempty"`
	Any      any         `json:"any,omitempty"`
	Num      json.Number `json:"num,omitempty"`
	Skipped  int         `json:"-"`
	Untagged int
	hidden   int
}

func TestCheck(t *testing.T) {
	_ = shape{}.hidden
	tests := []struct {
		js   string
		want string // "" for no error
	}{
		{`{}`, ""},
		{`{"maxFails":3,"band":1.5,"inner":{"window":"1s","clients":2},"list":[{"clients":1}],"Untagged":1}`, ""},
		{`{"any":{"whatever":[1,{"x":2}]},"num":5}`, ""},
		{`{"maxFails":"x"}`, ""}, // a type mismatch is encoding/json's to name
		{`{"band":1e-320}`, ""},  // a subnormal double, not zero
		{`{"band":0e-999}`, ""},  // zero as written
		{`{"band":-0.0}`, ""},
		{`{"unknownField":1}`, "unknownField: no such field"},
		{`{"MAXFAILS":3}`, "MAXFAILS: no such field; the field is maxFails (names match exactly)"},
		{`{"maxFails":1,"maxFails":2}`, "maxFails: given twice"},
		{`{"band":1e-400}`, "band 1e-400: not zero, but a double rounds it to zero"},
		{`{"band":-2e-324}`, "band -2e-324: not zero, but a double rounds it to zero"},
		{`{"band":2.5e-324}`, ""}, // above half the least subnormal: rounds up to it
		{`{"band":1e400}`, "band 1e400: beyond a double's range"},
		{`{"inner":{"Clients":2}}`, "inner.Clients: no such field; the field is clients (names match exactly)"},
		{`{"inner":{"clients":2,"clients":3}}`, "inner.clients: given twice"},
		{`{"list":[{"clients":1},{"size":2}]}`, "list[1].size: no such field"},
		{`{"any":{"x":1,"x":2}}`, "any.x: given twice"},
		{`{"any":[1e999]}`, "any[0] 1e999: beyond a double's range"},
		{`{"Skipped":1}`, "Skipped: no such field"},
		{`{"hidden":1}`, "hidden: no such field"},
		{`{"maxFails":1} {}`, "invalid character '{' after top-level value"},
		{`{"maxFails":`, "unexpected end of JSON input"},
	}
	for _, tt := range tests {
		err := Check([]byte(tt.js), reflect.TypeOf(shape{}))
		if tt.want == "" {
			assert.NoError(t, err, tt.js)
			continue
		}
		require.Error(t, err, tt.js)
		assert.Contains(t, err.Error(), tt.want, tt.js)
	}
}

// TestCheck_anyShape: with no shape, any key is taken, once.
func TestCheck_anyShape(t *testing.T) {
	assert.NoError(t, Check([]byte(`{"a":{"b":[1,2,{"c":null}]},"A":true}`), nil))
	err := Check([]byte(`{"a":{"b":1,"b":2}}`), nil)
	var e *Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, "a.b", e.Path)
	assert.EqualError(t, Check([]byte(`[1e-999]`), nil), "[0] 1e-999: not zero, but a double rounds it to zero")
}

// TestCheck_deep: text nested as deep as encoding/json reads (10000
// levels), or a long array, costs memory in proportion to its length: a
// path built at every level cost the square of the depth (hundreds of
// megabytes for 20 kB of brackets). The path is still named on an error.
func TestCheck_deep(t *testing.T) {
	const n = 9999
	for _, js := range []string{
		strings.Repeat("[", n) + strings.Repeat("]", n),
		strings.Repeat(`{"key":`, n) + "1" + strings.Repeat("}", n),
		"[" + strings.Repeat("1,", 100000) + "1]",
	} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		require.NoError(t, Check([]byte(js), nil))
		runtime.ReadMemStats(&after)
		assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(200*len(js)), "bytes allocated for %d bytes of text", len(js))
	}
	err := Check([]byte(strings.Repeat("[", 50)+"1e999"+strings.Repeat("]", 50)), nil)
	assert.EqualError(t, err, strings.Repeat("[0]", 50)+" 1e999: beyond a double's range")
	err = Check([]byte(`[{"a":[0,{"b":{"c":1,"c":2}}]}]`), nil)
	assert.EqualError(t, err, "[0].a[1].b.c: given twice")
}
