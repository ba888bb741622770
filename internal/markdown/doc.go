// Package markdown reads the repository's Markdown as GitHub renders it:
// the anchor each heading gets, so that tests can check that every link
// into a document (runbook URLs, the docs' cross references) lands on a
// heading that exists.
package markdown
