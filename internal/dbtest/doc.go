// Package dbtest starts private PostgreSQL and MariaDB servers for tests:
// each on a free loopback port, its data and temporary files in a
// temporary directory of its own (servers started at once never meet),
// with a user and password (as a soketi deployment has), stopped when the test
// ends. A test is skipped when the server's binaries are not installed,
// except under CI (CI=true), where it fails: scripts/ensure-deps.sh
// installs them.
package dbtest
