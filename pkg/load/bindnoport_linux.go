package load

import "syscall"

// ipBindAddressNoPort is IP_BIND_ADDRESS_NO_PORT (linux/in.h), which the
// syscall package does not name.
const ipBindAddressNoPort = 24

// bindNoPort makes a dial from a fixed source address leave the choice of
// port to connect(2). A port bind(2) picks is reserved for any destination
// and, after the close, stays out of every later connect's reach through
// TIME_WAIT (60 s): a 15,000-socket storm left too few ephemeral ports for
// the next benchmark's 19,000 sockets. connect picks a port per 4-tuple.
func bindNoPort(_, _ string, c syscall.RawConn) error {
	var err error
	if cerr := c.Control(func(fd uintptr) {
		err = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, ipBindAddressNoPort, 1)
	}); cerr != nil {
		return cerr
	}
	return err
}
