// Package luascript builds a package's Redis scripts from a table: each
// script is its own file under the package's scripts/ and the named
// preludes it is prepended with, in order, and nothing else is
// concatenated into it. It holds the preludes more than one package needs
// (NowMs, StreamIDs).
//
// Guarantees:
//   - A Script's source is its preludes' sources then its file, byte for
//     byte: building from the table adds no Lua, so no script does more
//     work per call than its own text says.
//   - Check (for the packages' tests) finds, without Redis, every name a
//     script or prelude reads or calls that is neither Lua's or Redis's
//     nor declared by it or a prelude before it, every file under
//     scripts/ that no script or prelude is built from, and every header
//     whose "uses:" line does not name the script's preludes in order.
//     Its tokenizer is Lua's lexical grammar; its scopes are coarse (a
//     name declared local anywhere in a script counts as declared
//     throughout it), so it misses a name used outside its scope, never
//     reports one that is declared.
//   - Consts reads the constants a prelude declares (local A, B = 1, 'x'),
//     so a test can compare them with the Go side's.
package luascript
