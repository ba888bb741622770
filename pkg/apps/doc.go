// Package apps loads the apps a headcount cluster serves: from an apps file
// (a JSON array in soketi's format, so a soketi app array works unchanged,
// or a soketi config file holding one) or, without one, a single app from
// the environment, under headcount's names or soketi's. A Registry serves one
// set of apps at a time and is safe for concurrent use; a reload (package
// appreload) replaces the set whole, and an *App is never modified.
package apps
