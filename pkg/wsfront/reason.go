package wsfront

// Reason is why a Front refused a connection or a request, or failed to
// accept one: what Options.OnRefuse counts.
type Reason uint8

const (
	// AcceptFailed means accepting a connection failed (out of file
	// descriptors, say); the accept loop retries with backoff.
	AcceptFailed Reason = iota + 1
	// AtCap is a connection past the socket cap, answered with 503 and
	// closed before its request head was read.
	AtCap
	// Refused is a request answered with an error status (400 or above),
	// by the front's parser or by the handler.
	Refused
)

func (r Reason) String() string {
	switch r {
	case AcceptFailed:
		return "accept_failed"
	case AtCap:
		return "at_cap"
	case Refused:
		return "refused"
	}
	return "unknown"
}
