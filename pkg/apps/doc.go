// Package apps loads the apps a headcount cluster serves: from an apps file
// (a JSON array in soketi's format, so a soketi app array works unchanged,
// or a soketi config file holding one), from a database table in soketi's
// layout (package appsdb), or, without either, a single app from the
// environment, under headcount's names or soketi's.
//
// Guarantees:
//   - Field names match without regard to case or underscores (soketi's
//     camelCase and snake_case alike); one field given twice under two
//     spellings is an error, as which would win depends on map order.
//   - A soketi setting headcount does not implement is ignored with a
//     warning (Registry.Warnings); any other unknown field is an error
//     naming it and its app. Every app is validated whole before any is
//     served, and every error is reported at once.
//   - A Registry serves one set of apps at a time and is safe for
//     concurrent use; a reload (package appreload) replaces the set whole,
//     and an *App is never modified, so a socket that holds one sees one
//     consistent app.
package apps
