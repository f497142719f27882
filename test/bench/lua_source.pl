#!/usr/bin/env perl
# lua_source.pl SCRIPTS_C ARRAY_NAME
# lua_source.pl SCRIPTS_C --library
# lua_source.pl SCRIPTS_C --function FNAME
#
# Print, byte for byte, the Lua source that slidewin keeps in the C array
# ARRAY_NAME (for instance lua_log_attempt) of SCRIPTS_C (src/scripts.c).
#
# The array is initialised by adjacent string literals, possibly mixed with
# macros that are themselves only string literals (LUA_PRELUDE): the C
# compiler concatenates them, and so does this script.  Only the escapes the
# sources can use in Lua text are understood: \n \t \r \" \' \\ \? and octal;
# anything else is refused, so that a change in src/scripts.c that this
# reader cannot follow fails loudly instead of producing a different script.
#
# The caller checks the result against Redis (SCRIPT EXISTS after slidewin
# has run the script once), so a wrong reading cannot go unnoticed.
use strict;
use warnings;

die "usage: $0 SCRIPTS_C ARRAY_NAME | --library | --function FNAME\n" unless @ARGV >= 2;
my ($file, $name) = splice(@ARGV, 0, 2);

open my $fh, '<', $file or die "$file: $!\n";
my $src = do { local $/; <$fh> };
close $fh;

# Drop comments (none of the literals contain comment openers; a literal
# that did would make the check against Redis fail, not pass silently).
$src =~ s{/\*.*?\*/}{ }gs;

sub unescape {
	my ($s) = @_;
	my %simple = (n => "\n", t => "\t", r => "\r", '"' => '"', "'" => "'",
		'\\' => '\\', '?' => '?');
	$s =~ s{\\([0-7]{1,3}|.)}{
		my $e = $1;
		if (exists $simple{$e}) { $simple{$e} }
		elsif ($e =~ /^[0-7]+$/) { chr(oct($e)) }
		else { die "unsupported escape \\$e in a string literal of $file\n" }
	}ge;
	return $s;
}

# Concatenate a run of tokens (string literals and names of string macros)
# into one string.  %macros maps macro names to their expansion.
my %macros;
sub concat_tokens {
	my ($text, $what) = @_;
	my $out = '';
	while ($text =~ /\G\s*(?:"((?:[^"\\\n]|\\.)*)"|([A-Za-z_]\w*))/gc) {
		if (defined $1) {
			$out .= unescape($1);
		} elsif (exists $macros{$2}) {
			$out .= $macros{$2};
		} else {
			die "$what uses $2, which is not a string macro of $file\n";
		}
	}
	$text =~ /\G\s*$/gc or die "$what: cannot read past position " . (pos($text) // 0) . "\n";
	return $out;
}

# String-only macros: #define NAME "..." with backslash continuations, or
# a run of string literals and string macros defined before it.
while ($src =~ /^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)[ \t]+((?:[^\n]*\\\n)*[^\n]*)$/mg) {
	my ($m, $body) = ($1, $2);
	$body =~ s/\\\n/ /g;
	next unless $body =~ /^\s*"/ || ($body =~ /^\s*([A-Za-z_]\w*)/ && exists $macros{$1});
	my $val = eval { concat_tokens($body, "macro $m") };
	$macros{$m} = $val if defined $val;
}

# --library, --function FNAME: the library of Redis Functions that
# scripts.c builds (library_build), or the full name of one of its
# functions: the prelude once, then each script of the table that names a
# body and a function, wrapped, under a name carrying 16 hex digits of the
# SHA1 of the prelude and of each function's name and body in table order.
if ($name eq '--library' || $name eq '--function') {
	my $prelude = $macros{LUA_PRELUDE} // die "LUA_PRELUDE not found in $file\n";
	my @fns;
	while ($src =~ /\[SCRIPT_\w+\]\s*=\s*\{\s*\w+\s*,\s*([A-Za-z_]\w*)\s*,\s*"(\w+)"\s*\}/g) {
		exists $macros{$1} or die "$1 is not a string macro of $file\n";
		push @fns, [ $2, $macros{$1} ];
	}
	@fns or die "no function in the script table of $file\n";
	require Digest::SHA;
	my $sha = Digest::SHA->new(1);
	$sha->add($prelude);
	$sha->add($_->[0], $_->[1]) for @fns;
	my $tag = substr($sha->hexdigest, 0, 16);
	binmode STDOUT;
	if ($name eq '--function') {
		my $want = shift @ARGV // die "usage: $0 SCRIPTS_C --function FNAME\n";
		grep { $_->[0] eq $want } @fns or die "no function $want in $file\n";
		print "slidewin_${tag}_$want";
		exit 0;
	}
	print "#!lua name=slidewin_$tag\n$prelude";
	print "redis.register_function('slidewin_${tag}_$_->[0]', function(KEYS, ARGV)\n"
	  . "keep, bkeep, clock_s = false, false, nil\n$_->[1]end)\n" for @fns;
	exit 0;
}

# The array: NAME[] = tokens ;  -- a ';' inside a literal is skipped over.
$src =~ /\b\Q$name\E\s*\[\s*\]\s*=/g or die "array $name not found in $file\n";
my $init = '';
while ($src =~ /\G(\s*"(?:[^"\\\n]|\\.)*"|\s*[A-Za-z_]\w*|\s*;)/gc) {
	my $tok = $1;
	last if $tok =~ /^\s*;$/;
	$init .= $tok;
}
my $script = concat_tokens($init, "array $name");
die "array $name is empty\n" if $script eq '';
binmode STDOUT;
print $script;
