#!/usr/bin/env perl
# lua_source.pl SCRIPTS_C ARRAY_NAME
# lua_source.pl SCRIPTS_C --library
# lua_source.pl SCRIPTS_C --function FNAME
# lua_source.pl SCRIPTS_C --map ARRAY_NAME
#
# Print, byte for byte, the Lua source that slidewin sends Redis as the C
# array ARRAY_NAME (for instance lua_log_attempt) of SCRIPTS_C
# (src/store/redis/scripts.c), for instance to run it with redis-cli --eval.
#
# The Lua is in the .lua files of src/store/redis/lua beside SCRIPTS_C: each file NAME.lua
# is the string macro LUA_NAME (in capitals) of the header the build makes
# out of them (src/store/redis/lua/lua2c.pl, whose lua_text() reads the files here too,
# leaving out each file's header comment as the build does).  SCRIPTS_C
# puts the macros together: an array is initialised by adjacent macros
# (and string literals, which it may still use), possibly through macros
# that are themselves only such a run (LUA_PRELUDE): the C compiler
# concatenates them, and so does this script.  Only the escapes the sources
# can use in Lua text are understood: \n \t \r \" \' \\ \? and octal;
# anything else is refused, so that a change in src/store/redis/scripts.c that this
# reader cannot follow fails loudly instead of producing a different script.
#
# --map prints where each line of the script comes from, one line per piece:
# the script's line the piece starts at, its file (or - for a literal of
# SCRIPTS_C), and the lines of the file's header comment, so that the file's
# line is the script's, minus the first, plus one, plus the header's.
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

(my $luadir = $file) =~ s{[^/]*\z}{lua};
$luadir = "./$luadir" unless $luadir =~ m{^\.{0,2}/};
require "$luadir/lua2c.pl";

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
# into one list of pieces, each [file or undef, text].  %macros maps macro
# names to their pieces: the .lua files first, then the macros of SCRIPTS_C.
my %macros;
for my $lua (sort glob("$luadir/*.lua")) {
	(my $rel = $lua) =~ s{^\./}{};
	$macros{ lua_macro($lua) } = [ [ $rel, lua_text($lua) ] ];
}
%macros or die "no .lua file in $luadir\n";
sub text { join '', map { $_->[1] } @{ $_[0] } }
sub concat_tokens {
	my ($text, $what) = @_;
	my @out;
	while ($text =~ /\G\s*(?:"((?:[^"\\\n]|\\.)*)"|([A-Za-z_]\w*))/gc) {
		if (defined $1) {
			push @out, [ undef, unescape($1) ];
		} elsif (exists $macros{$2}) {
			push @out, @{ $macros{$2} };
		} else {
			die "$what uses $2, which is not a string macro of $file\n";
		}
	}
	$text =~ /\G\s*$/gc or die "$what: cannot read past position " . (pos($text) // 0) . "\n";
	return \@out;
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
	my $prelude = text($macros{LUA_PRELUDE} // die "LUA_PRELUDE not found in $file\n");
	my @fns;
	while ($src =~ /\[SCRIPT_\w+\]\s*=\s*\{\s*\w+\s*,\s*([A-Za-z_]\w*)\s*,\s*"(\w+)"\s*\}/g) {
		exists $macros{$1} or die "$1 is not a string macro of $file\n";
		push @fns, [ $2, text($macros{$1}) ];
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

my $map = $name eq '--map';
$name = shift @ARGV // die "usage: $0 SCRIPTS_C --map ARRAY_NAME\n" if $map;

# The array: NAME[] = tokens ;  -- a ';' inside a literal is skipped over.
$src =~ /\b\Q$name\E\s*\[\s*\]\s*=/g or die "array $name not found in $file\n";
my $init = '';
while ($src =~ /\G(\s*"(?:[^"\\\n]|\\.)*"|\s*[A-Za-z_]\w*|\s*;)/gc) {
	my $tok = $1;
	last if $tok =~ /^\s*;$/;
	$init .= $tok;
}
my $pieces = concat_tokens($init, "array $name");
my $script = text($pieces);
die "array $name is empty\n" if $script eq '';
binmode STDOUT;
if ($map) {
	my $line = 1;
	for my $p (@$pieces) {
		my $header = 0;
		if (defined $p->[0]) {
			open my $lf, '<', $p->[0] or die "$p->[0]: $!\n";
			my $whole = do { local $/; <$lf> };
			$header = (substr($whole, 0, length($whole) - length($p->[1])) =~ tr/\n//);
		}
		print join("\t", $line, $p->[0] // '-', $header), "\n";
		$line += ($p->[1] =~ tr/\n//);
	}
	exit 0;
}
print $script;
