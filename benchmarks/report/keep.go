package main

import "strings"

// sections splits a Markdown file at its level-2 headings: the text before
// the first ("" heading) and each section from its heading line to the
// next level-2 heading, in order. Joining the texts gives the file back.
func sections(s string) (headings, texts []string) {
	start, heading := 0, ""
	for i := 0; i < len(s); {
		end := strings.IndexByte(s[i:], '\n')
		if end < 0 {
			end = len(s)
		} else {
			end += i + 1
		}
		if line := strings.TrimRight(s[i:end], "\n"); strings.HasPrefix(line, "## ") && i > 0 {
			headings, texts = append(headings, heading), append(texts, s[start:i])
			start, heading = i, line
		} else if strings.HasPrefix(line, "## ") {
			heading = line
		}
		i = end
	}
	return append(headings, heading), append(texts, s[start:])
}

// keepSections returns generated with each level-2 section of old that
// generated lacks carried over verbatim: the sections a full run does not
// measure (the guards and hedging, which their own commands write). A kept
// section goes after the section that preceded it in old, if generated
// has that one (after what it already placed there), else before
// generated's "## Cores" section, else at the end.
func keepSections(old, generated string) string {
	oh, ot := sections(old)
	gh, gt := sections(generated)
	have := make(map[string]bool, len(gh))
	for _, h := range gh {
		have[sectionKey(h)] = true
	}
	after := map[string][]string{} // generated's heading -> kept texts that follow it
	var orphans []string
	anchor := ""
	for i, h := range oh {
		switch {
		case h == "":
		case have[sectionKey(h)]:
			anchor = sectionKey(h)
		case anchor != "":
			after[anchor] = append(after[anchor], withBreak(ot[i]))
		default:
			orphans = append(orphans, withBreak(ot[i]))
		}
	}
	if len(orphans) == 0 && len(after) == 0 {
		return generated
	}
	var b strings.Builder
	keep := func(texts []string) {
		if len(texts) == 0 {
			return
		}
		switch s := b.String(); {
		case s == "" || strings.HasSuffix(s, "\n\n"):
		case strings.HasSuffix(s, "\n"):
			b.WriteString("\n")
		default:
			b.WriteString("\n\n")
		}
		b.WriteString(strings.Join(texts, ""))
	}
	placed := false
	for i, h := range gh {
		if !placed && strings.HasPrefix(h, "## Cores") {
			keep(orphans)
			placed = true
		}
		b.WriteString(gt[i])
		keep(after[sectionKey(h)])
	}
	if !placed {
		keep(orphans)
	}
	return strings.TrimRight(b.String(), "\n") + "\n"
}

// sectionKey is what names a section across runs: its heading, but for
// "## Cores", whose heading names the GOMAXPROCS of the run that measured
// it.
func sectionKey(heading string) string {
	if strings.HasPrefix(heading, "## Cores") {
		return "## Cores"
	}
	return heading
}

// withBreak ends s with a blank line, as a section before a heading ends.
func withBreak(s string) string {
	if s == "" {
		return s
	}
	return strings.TrimRight(s, "\n") + "\n\n"
}
