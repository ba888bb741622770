// Package config reads each binary's settings: defaults, then environment
// variables HEADCOUNT_<FLAG_IN_UPPER_SNAKE>, then flags (later sources win),
// and validates all of them before anything dials Redis.
//
// Guarantees:
//   - Every flag has its variable (EnvName), and a variable set to "" counts
//     as unset, so a blank value in a manifest never overrides a default.
//   - Every error names the setting it is about, and all of them are
//     reported at once; callers exit with code 2 on any of them (--help and
//     --version stop too, with code 0).
//   - The Redis TLS and password files are loaded at parse time by the same
//     functions (LoadRedisCA, LoadRedisCert, ReadRedisPassword) redisx
//     re-reads them with on rotation, so a file that is missing or bad at
//     the start stops the binary, and the same checks judge a rotated one.
//   - Defaults that depend on the machine (--max-sockets, --writers,
//     httpapi's --max-connections) are derived from the open-file limit and
//     the CPUs the process sees, by the exported functions that say how.
package config
