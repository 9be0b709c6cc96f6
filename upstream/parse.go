package upstream

import (
	"fmt"
	"strings"

	"github.com/lbgo/balancer"
)

// ParseAll reads every upstream block in src, in file order; filename is
// used only in error messages. src may be bare `upstream NAME { ... }`
// blocks or an nginx configuration around them: the blocks inside
// `http { ... }` are read, and every other directive and block (events,
// server, map, ...) is skipped unread. On failure ParseAll returns a
// *ParseError naming the line; it never panics, whatever src holds.
//
// As in nginx 1.22, two upstream blocks may not share a name, a server
// without a port is port 80, two servers may share an address (two peers:
// see Block.Peers), and a second balancing-method directive replaces the
// first.
func ParseAll(filename string, src []byte) ([]*Block, error) {
	p := &parser{lexer: lexer{file: filename, src: src, line: 1}}
	blocks, err := p.context(false)
	if err != nil {
		return nil, err
	}
	// nginx checks run-time resolution once the whole configuration is
	// read: a resolver in the http context after the block counts.
	for _, b := range blocks {
		if err := p.checkResolve(b, p.http); err != nil {
			return nil, err
		}
	}
	return blocks, nil
}

// Parse reads the only upstream block in src, as ParseAll does; it returns
// a *ParseError wrapping ErrNoUpstream if there is none and
// ErrManyUpstreams, naming the blocks, if there are several.
func Parse(filename string, src []byte) (*Block, error) {
	return ParseNamed(filename, src, "")
}

// ParseNamed reads the upstream block called name in src, as ParseAll
// does, or, for an empty name, the only block, as Parse does. It returns a
// *ParseError wrapping ErrNoUpstream, naming the blocks there are, if none
// is called name.
func ParseNamed(filename string, src []byte, name string) (*Block, error) {
	blocks, err := ParseAll(filename, src)
	if err != nil {
		return nil, err
	}
	if len(blocks) == 0 {
		end := 1 + strings.Count(string(src), "\n")
		return nil, &ParseError{File: filename, Line: end, Msg: `no "upstream" block`, Err: ErrNoUpstream}
	}
	if name == "" && len(blocks) == 1 {
		return blocks[0], nil
	}
	for _, b := range blocks {
		if name != "" && b.Name == name {
			return b, nil
		}
	}
	list := make([]string, len(blocks))
	for i, b := range blocks {
		list[i] = fmt.Sprintf("%q on line %d", b.Name, b.Line)
	}
	if name == "" {
		return nil, &ParseError{File: filename, Line: blocks[1].Line, Err: ErrManyUpstreams,
			Msg: fmt.Sprintf("%d upstream blocks (%s): choose one by name", len(blocks), strings.Join(list, ", "))}
	}
	return nil, &ParseError{File: filename, Line: blocks[0].Line, Err: ErrNoUpstream,
		Msg: fmt.Sprintf("no upstream %q; there is %s", name, strings.Join(list, ", "))}
}

type parser struct {
	lexer
	lines  map[string]int // upstream name -> line, to refuse duplicates
	blocks []*Block
	http   resolverConf // the http context's resolver and resolver_timeout
}

// directive reads the words of one directive and the token that ends it.
func (p *parser) directive() ([]token, token, *ParseError) {
	var words []token
	for {
		t, err := p.next()
		if err != nil || t.kind != tokWord {
			return words, t, err
		}
		words = append(words, t)
	}
}

// context reads the directives of the main context or, when inHTTP, of an
// http block up to its "}", collecting the upstream blocks.
func (p *parser) context(inHTTP bool) ([]*Block, *ParseError) {
	for {
		words, end, err := p.directive()
		switch {
		case err != nil:
			return nil, err
		case len(words) == 0 && end.kind == tokClose && inHTTP:
			return p.blocks, nil
		case len(words) == 0 && end.kind == tokEOF && inHTTP:
			return nil, p.errorf(end.line, ErrSyntax, "unexpected end of file, missing \"}\"")
		case len(words) == 0 && end.kind == tokEOF:
			return p.blocks, nil
		case len(words) == 0:
			return nil, p.errorf(end.line, ErrSyntax, "unexpected %v", end)
		case words[0].text == "upstream":
			if err := p.upstream(words, end); err != nil {
				return nil, err
			}
		case end.kind == tokClose:
			last := words[len(words)-1]
			return nil, p.errorf(last.line, ErrSyntax, "missing \";\" after %v", last)
		case end.kind == tokEOF:
			last := words[len(words)-1]
			return nil, p.errorf(last.line, ErrSyntax, "missing \";\" after %v", last)
		case words[0].text == "http" && !inHTTP:
			if len(words) > 1 || end.kind != tokOpen {
				return nil, p.errorf(words[0].line, ErrSyntax, "\"http\" takes no arguments, only a block")
			}
			if _, err := p.context(true); err != nil {
				return nil, err
			}
		case inHTTP && words[0].text == "resolver" && end.kind == tokSemi:
			if err := p.resolver(words, &p.http); err != nil {
				return nil, err
			}
		case inHTTP && words[0].text == "resolver_timeout" && end.kind == tokSemi:
			if err := p.resolverTimeout(words, &p.http); err != nil {
				return nil, err
			}
		case words[0].text == "http" || words[0].text == "server" && end.kind == tokSemi:
			// A server line out of its upstream block is a likely slip.
			return nil, p.errorf(words[0].line, ErrSyntax, "%v directive is not allowed here", words[0])
		case end.kind == tokOpen:
			if err := p.skipBlock(); err != nil {
				return nil, err
			}
		}
		// Any other directive ended by ";" is skipped.
	}
}

// skipBlock skips the rest of a block whose "{" has been read, nested
// blocks included.
func (p *parser) skipBlock() *ParseError {
	for depth := 1; depth > 0; {
		t, err := p.next()
		switch {
		case err != nil:
			return err
		case t.kind == tokEOF:
			return p.errorf(t.line, ErrSyntax, "unexpected end of file, missing \"}\"")
		case t.kind == tokOpen:
			depth++
		case t.kind == tokClose:
			depth--
		}
	}
	return nil
}

// upstream parses `upstream NAME { ... }`, its first words read, and
// appends the block to p.blocks.
func (p *parser) upstream(words []token, end token) *ParseError {
	switch {
	case end.kind != tokOpen:
		last := words[len(words)-1]
		return p.errorf(last.line, ErrSyntax, "missing \"{\" after %v", last)
	case len(words) == 1:
		return p.errorf(end.line, ErrSyntax, "missing upstream name before \"{\"")
	case len(words) > 2:
		return p.errorf(words[2].line, ErrSyntax, "unexpected %v after the upstream name", words[2])
	case words[1].text == "":
		return p.errorf(words[1].line, ErrSyntax, "empty upstream name")
	}
	name := words[1].text
	if first, dup := p.lines[name]; dup {
		return p.errorf(words[0].line, ErrSyntax, "duplicate upstream %q, first on line %d", name, first)
	}
	if p.lines == nil {
		p.lines = make(map[string]int)
	}
	p.lines[name] = words[0].line
	b := &Block{File: p.file, Name: name, Line: words[0].line}
	var sum int64        // weights so far, checked against MaxWeightSum
	var own resolverConf // the block's resolver and resolver_timeout
	for {
		words, end, err := p.directive()
		if err != nil {
			return err
		}
		if len(words) == 0 {
			if end.kind == tokClose {
				break
			}
			if end.kind == tokEOF {
				return p.errorf(end.line, ErrSyntax, "unexpected end of file, missing \"}\"")
			}
			return p.errorf(end.line, ErrSyntax, "unexpected %v", end)
		}
		if ignored[words[0].text] && end.kind == tokSemi {
			continue
		}
		if f, ok := resolveDirectives[words[0].text]; ok {
			if err := p.directiveEnd(words, end, 1); err != nil {
				return err
			}
			if err := f(p, words, b, &own); err != nil {
				return err
			}
			continue
		}
		if _, ok := methodArgs[words[0].text]; ok {
			if err := p.directiveEnd(words, end, 1); err != nil {
				return err
			}
			if b.Method, err = p.method(words); err != nil {
				return err
			}
			continue
		}
		if words[0].text != "server" {
			return p.errorf(words[0].line, ErrSyntax, "unknown directive %v in upstream %q", words[0], b.Name)
		}
		if err := p.directiveEnd(words, end, 2); err != nil {
			return err
		}
		s, err := p.server(words, b.Method)
		if err != nil {
			return err
		}
		if sum += int64(s.Weight); sum > balancer.MaxWeightSum {
			return p.errorf(s.Line, balancer.ErrInvalidConfig, "weights sum past %d at server %q", balancer.MaxWeightSum, s.Name)
		}
		b.Servers = append(b.Servers, s)
	}
	if err := p.check(b); err != nil {
		return err
	}
	b.Resolvers, b.ResolverValid, b.ResolverTimeout, b.ResolverNetwork = own.addrs, own.valid, own.timeout, own.network
	p.blocks = append(p.blocks, b)
	return nil
}

// directiveEnd checks that a directive inside an upstream block ends with
// ";", and that it does not run into a server line: no word from words[from]
// on is "server".
func (p *parser) directiveEnd(words []token, end token, from int) *ParseError {
	last := words[len(words)-1]
	switch {
	case end.kind == tokOpen:
		return p.errorf(end.line, ErrSyntax, "unexpected \"{\" after %v", last)
	case end.kind != tokSemi:
		return p.errorf(last.line, ErrSyntax, "missing \";\" after %v", last)
	}
	for i := max(from, 1); i < len(words); i++ {
		if words[i].text == "server" {
			// The previous directive ran on: its ";" is missing.
			return p.errorf(words[i-1].line, ErrSyntax, "missing \";\" after %v", words[i-1])
		}
	}
	return nil
}

// ignored lists the upstream directives that tune connections, not the
// choice of server, so a block copied from a real configuration parses
// unchanged; their arguments are not checked.
var ignored = map[string]bool{
	"keepalive": true, "keepalive_requests": true, "keepalive_time": true,
	"keepalive_timeout": true, "ntlm": true,
}

// resolveDirectives are the upstream directives that run-time resolution
// reads (resolve.go).
var resolveDirectives = map[string]func(p *parser, words []token, b *Block, rc *resolverConf) *ParseError{
	"zone":     func(p *parser, words []token, b *Block, _ *resolverConf) *ParseError { return p.zone(words, b) },
	"resolver": func(p *parser, words []token, _ *Block, rc *resolverConf) *ParseError { return p.resolver(words, rc) },
	"resolver_timeout": func(p *parser, words []token, _ *Block, rc *resolverConf) *ParseError {
		return p.resolverTimeout(words, rc)
	},
}

// check rejects what nginx rejects once the block is read: no server, or
// backup servers only.
func (p *parser) check(b *Block) *ParseError {
	if len(b.Servers) == 0 {
		return p.errorf(b.Line, ErrNoServers, "no servers in upstream %q", b.Name)
	}
	for _, s := range b.Servers {
		if !s.Backup {
			return nil
		}
	}
	s := b.Servers[0]
	return p.errorf(s.Line, ErrNoServers, "backup server %q but no primary server in upstream %q", s.Name, b.Name)
}
