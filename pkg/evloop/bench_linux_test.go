package evloop

import (
	"io"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// BenchmarkEcho streams through echoing connections with each read buffer
// size: what the size of a loop's shared buffer buys in throughput.
func BenchmarkEcho(b *testing.B) {
	for _, size := range []int{4 << 10, 16 << 10, 64 << 10} {
		b.Run("buf="+strconv.Itoa(size>>10)+"KiB", func(b *testing.B) {
			s, err := Listen("127.0.0.1:0", Options{ReadBufferSize: size, OnAccept: func(c *Conn) bool { c.SetHandler(echo{}); return true }})
			require.NoError(b, err)
			served := make(chan error, 1)
			go func() { served <- s.Serve() }()
			defer func() { require.NoError(b, s.Close()); require.ErrorIs(b, <-served, ErrServerClosed) }()
			const conns, chunk = 8, 256 << 10
			payload := make([]byte, chunk)
			b.SetBytes(conns * chunk)
			var wg sync.WaitGroup
			clients := make([]chan struct{}, conns)
			done := make(chan struct{}, conns)
			for i := range conns {
				c := dialB(b, s)
				clients[i] = make(chan struct{})
				wg.Go(func() {
					defer c.Close()
					got := make([]byte, chunk)
					for range clients[i] {
						go func() { _, _ = c.Write(payload) }()
						if _, err := io.ReadFull(c, got); err != nil {
							b.Error(err)
						}
						done <- struct{}{}
					}
				})
			}
			b.ResetTimer()
			for range b.N {
				for _, ch := range clients {
					ch <- struct{}{}
				}
				for range conns {
					<-done
				}
			}
			b.StopTimer()
			for _, ch := range clients {
				close(ch)
			}
			wg.Wait()
		})
	}
}

// BenchmarkWrite is one small frame written to an idle connection whose
// peer reads: the cost a delivery pays per socket.
func BenchmarkWrite(b *testing.B) {
	conns := make(chan *Conn, 1)
	s, err := Listen("127.0.0.1:0", Options{OnAccept: func(c *Conn) bool { conns <- c; return true }})
	require.NoError(b, err)
	served := make(chan error, 1)
	go func() { served <- s.Serve() }()
	defer func() { require.NoError(b, s.Close()); require.ErrorIs(b, <-served, ErrServerClosed) }()
	client := dialB(b, s)
	defer client.Close()
	go func() { _, _ = io.Copy(io.Discard, client) }()
	c := <-conns
	frame := make([]byte, 120)
	b.ReportAllocs()
	b.SetBytes(int64(len(frame)))
	for b.Loop() {
		if _, err := c.Write(frame); err != nil {
			b.Fatal(err)
		}
	}
}
