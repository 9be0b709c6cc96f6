package upstream

import (
	"bytes"
	"fmt"
	"strings"
)

// The lexer splits the text into tokens the way nginx's ngx_conf_read_token
// does: words end at whitespace, ";" or "{" (so "}" inside a word is part of
// it, as in nginx); "#" starts a comment only where a token could start;
// a word may be quoted with " or ', and a quoted word must be followed by
// whitespace, ";" or "{". A backslash keeps the next character in the word.

type tokKind uint8

const (
	tokEOF   tokKind = iota
	tokWord          // a word, quotes removed and escapes applied
	tokSemi          // ;
	tokOpen          // {
	tokClose         // }
)

type token struct {
	kind tokKind
	text string
	line int // line where the token starts
}

// String quotes the token for error messages.
func (t token) String() string {
	switch t.kind {
	case tokEOF:
		return "end of file"
	case tokSemi:
		return `";"`
	case tokOpen:
		return `"{"`
	case tokClose:
		return `"}"`
	}
	return fmt.Sprintf("%q", t.text)
}

// punct maps the characters that are tokens by themselves to their kind.
var punct = map[byte]tokKind{';': tokSemi, '{': tokOpen, '}': tokClose}

// escapes maps the character after a backslash to what nginx makes of it.
var escapes = map[byte]byte{'"': '"', '\'': '\'', '\\': '\\', 't': '\t', 'r': '\r', 'n': '\n'}

// lexer reads tokens from src, counting lines from 1.
type lexer struct {
	file string
	src  []byte
	pos  int
	line int
}

func (l *lexer) errorf(line int, sentinel error, format string, args ...any) *ParseError {
	return &ParseError{File: l.file, Line: line, Msg: fmt.Sprintf(format, args...), Err: sentinel}
}

// next returns the next token; at the end of the text it returns tokEOF on
// the last line (one past the last newline, as nginx counts).
func (l *lexer) next() (token, *ParseError) {
	for l.pos < len(l.src) {
		switch c := l.src[l.pos]; c {
		case '\n':
			l.line++
			l.pos++
		case ' ', '\t', '\r':
			l.pos++
		case '#':
			for l.pos < len(l.src) && l.src[l.pos] != '\n' {
				l.pos++
			}
		case ';', '{', '}':
			l.pos++
			return token{kind: punct[c], line: l.line}, nil
		case '"', '\'':
			return l.quoted(c)
		default:
			return l.word(), nil
		}
	}
	return token{kind: tokEOF, line: l.line}, nil
}

// word reads an unquoted word.
func (l *lexer) word() token {
	t := token{kind: tokWord, line: l.line}
	start := l.pos
	for l.pos < len(l.src) {
		c := l.src[l.pos]
		if c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == ';' || c == '{' {
			break
		}
		l.skip()
	}
	t.text = unescape(l.src[start:l.pos])
	return t
}

// quoted reads a word quoted with q.
func (l *lexer) quoted(q byte) (token, *ParseError) {
	t := token{kind: tokWord, line: l.line}
	l.pos++
	start := l.pos
	for l.pos < len(l.src) && l.src[l.pos] != q {
		l.skip()
	}
	if l.pos == len(l.src) {
		return t, l.errorf(t.line, ErrSyntax, "unterminated quoted string")
	}
	t.text = unescape(l.src[start:l.pos])
	l.pos++
	if l.pos < len(l.src) && !strings.ContainsRune(" \t\r\n;{", rune(l.src[l.pos])) {
		return t, l.errorf(l.line, ErrSyntax, "unexpected %q after quoted string", l.src[l.pos:l.pos+1])
	}
	return t, nil
}

// skip moves past one character of a word, or two for a backslash escape,
// counting newlines.
func (l *lexer) skip() {
	n := 1
	if l.src[l.pos] == '\\' && l.pos+1 < len(l.src) {
		n = 2
	}
	for _, c := range l.src[l.pos : l.pos+n] {
		if c == '\n' {
			l.line++
		}
	}
	l.pos += n
}

// unescape applies nginx's escapes: \" \' \\ drop the backslash, \t \r \n
// are control characters, and any other backslash stays.
func unescape(b []byte) string {
	if bytes.IndexByte(b, '\\') < 0 {
		return string(b)
	}
	var s strings.Builder
	for i := 0; i < len(b); i++ {
		if b[i] == '\\' && i+1 < len(b) {
			if c, ok := escapes[b[i+1]]; ok {
				s.WriteByte(c)
				i++
				continue
			}
		}
		s.WriteByte(b[i])
	}
	return s.String()
}
