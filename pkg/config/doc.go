// Package config reads each binary's settings: defaults, then environment
// variables HEADCOUNT_<FLAG_IN_UPPER_SNAKE>, then flags (later sources win),
// and validates all of them before anything dials Redis. Every error names
// the setting it is about; callers exit with code 2 on any of them. The
// Redis TLS and password files are loaded then, by the same functions
// (LoadRedisCA, LoadRedisCert, ReadRedisPassword) redisx re-reads them
// with, so a file that is missing or bad at the start stops the binary.
package config
