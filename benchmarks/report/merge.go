package main

import "strings"

// keepSections returns generated, the whole file as a full run writes it,
// with every section of old (a "## " heading to the next) whose heading
// generated lacks: the sections measured apart (the guards, by ONLY) or
// written by hand (hedging, by benchmarks/hedging.sh). Each kept section
// goes after the nearest section before it in old that generated has, or
// after the file's head if there is none; kept sections stay in their
// order. A heading inside a fenced code block is not one.
func keepSections(old, generated string) string {
	_, oldSecs := splitSections(old) // the head is generated
	head, secs := splitSections(generated)
	have := map[string]bool{}
	for _, s := range secs {
		have[s.heading] = true
	}
	// after[h] holds the kept sections whose nearest generated
	// predecessor in old is headed h ("" for the head), in old's order.
	after := map[string][]string{}
	anchor := ""
	for _, s := range oldSecs {
		if have[s.heading] {
			anchor = s.heading
			continue
		}
		after[anchor] = append(after[anchor], s.text)
	}
	parts := []string{head}
	parts = append(parts, after[""]...)
	for _, s := range secs {
		parts = append(parts, s.text)
		parts = append(parts, after[s.heading]...)
	}
	var b strings.Builder
	for i, p := range parts {
		b.WriteString(p)
		if i < len(parts)-1 && p != "" && !strings.HasSuffix(p, "\n\n") {
			// A section that ended the file now has one after it.
			b.WriteString(strings.Repeat("\n", 2-trailingNewlines(p)))
		}
	}
	return b.String()
}

// trailingNewlines counts the newlines that end s, up to 2.
func trailingNewlines(s string) int {
	n := 0
	for n < 2 && strings.HasSuffix(s[:len(s)-n], "\n") {
		n++
	}
	return n
}

// section is one "## " section: its heading line and its text, the
// heading line included, up to the next section.
type section struct {
	heading, text string
}

// splitSections cuts s into its head (the text before the first "## "
// heading) and its sections.
func splitSections(s string) (head string, secs []section) {
	lines := strings.SplitAfter(s, "\n")
	fenced := false
	start := -1 // the line of the current section's heading; -1: the head
	var cur strings.Builder
	flush := func() {
		if start < 0 {
			head = cur.String()
		} else {
			secs = append(secs, section{strings.TrimRight(lines[start], "\n"), cur.String()})
		}
		cur.Reset()
	}
	for i, l := range lines {
		if strings.HasPrefix(l, "```") {
			fenced = !fenced
		}
		if !fenced && strings.HasPrefix(l, "## ") {
			flush()
			start = i
		}
		cur.WriteString(l)
	}
	flush()
	return head, secs
}

// headingOf is the heading line of a section's text.
func headingOf(text string) string {
	h, _, _ := strings.Cut(text, "\n")
	return h
}
