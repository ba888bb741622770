package appsdb

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPoolCap: a Source never holds more than maxConns connections,
// however often it is asked to reload.
func TestPoolCap(t *testing.T) {
	t.Parallel()
	for _, url := range []string{"postgres://u:p@127.0.0.1:1/db", "mysql://u:p@127.0.0.1:1/db"} {
		s, err := New(Config{URL: url})
		require.NoError(t, err)
		require.Equal(t, maxConns, s.db.Stats().MaxOpenConnections, url)
		require.NoError(t, s.Close())
	}
}
