// Package logging builds the one root hclog.Logger of a binary. The app
// (wsnode, cleaner, httpapi) names it after itself and its packages call
// Named on that with their component's name, so every line says
// <binary>.<component>; nothing else in headcount creates loggers. In both
// formats a duration reads as Go writes it ("3s"). Loggers are safe for
// concurrent use.
package logging
