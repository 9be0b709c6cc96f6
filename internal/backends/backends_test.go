package backends

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
)

func TestParse(t *testing.T) {
	peers, err := Parse("127.0.0.1:9001, 127.0.0.1:9002=3", balancer.MaxFails(2))
	require.NoError(t, err)
	require.Len(t, peers, 2)
	assert.Equal(t, "127.0.0.1:9001", peers[0].Addr())
	assert.Equal(t, 1, peers[0].Weight())
	assert.Equal(t, "127.0.0.1:9002", peers[1].Addr())
	assert.Equal(t, 3, peers[1].Weight())
	assert.Equal(t, 2, peers[1].MaxFails())
}

func TestParse_errors(t *testing.T) {
	for in, want := range map[string]string{
		"":       "-backends is required",
		"  ":     "-backends is required",
		"a:1=x":  `backend "a:1=x": weight "x" is not a number`,
		"a:1,b=": `backend "b=": weight "" is not a number`,
	} {
		_, err := Parse(in)
		assert.EqualError(t, err, want, "%q", in)
	}
}
