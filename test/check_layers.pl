#!/usr/bin/env perl
# check_layers.pl [--layers FILE] [--strict] [SRC]: the house rules of src/, read from
# the code itself. A unit is a .c file and the .h of the same name beside
# it, with its NAME_int.h if it has one: what it shares with the files of
# its own folder, which no file of another folder may include. A unit depends on another when one of its files includes a header of
# the other ("name.h" includes only; system and PostgreSQL headers are not
# ours), or when its object file uses a symbol the other's object defines
# (nm: undefined symbols against defined ones). Build first (make all): a
# unit whose object is missing is checked by its includes alone, and said
# so (--strict: a breach, as make test has built everything first).
#
# The layer of a unit is the folder it lives in, ordered from the ground up
# by the layers file (default SRC/LAYERS: one layer a line, '#' comments;
# "." names SRC itself). A line may name several folders: they are side by
# side, on one level, and none of them may depend on another. Two rules:
#   - nothing runs upward or sideways: a unit depends only on units of its
#     own folder or of lines below it;
#   - no circles: no two units depend on each other, however indirectly.
# Every breach is printed with the file and the header or symbols that make
# it; the last line says how many. Exit 1 on any breach (or a unit outside
# every layer), 0 otherwise.
use strict;
use warnings;
use File::Basename qw(dirname basename);
use File::Find;
use File::Spec;

my ($layers_file, $strict);
while (@ARGV && $ARGV[0] =~ /^--/)
{
	my $opt = shift @ARGV;
	if ($opt eq '--layers') { $layers_file = shift @ARGV }
	elsif ($opt eq '--strict') { $strict = 1 }
	else { die "usage: check_layers.pl [--layers FILE] [--strict] [SRC]\n" }
}
my $src = shift(@ARGV) // 'src';
$src =~ s{/+$}{};
$layers_file //= "$src/LAYERS";

open my $lf, '<', $layers_file or die "check_layers: cannot read $layers_file: $!\n";
my (@layers, @lines, %rank);
while (<$lf>)
{
	s/#.*//;
	s/^\s+|\s+$//g;
	next if $_ eq '';
	my @peers = split /\s+/;
	for my $f (@peers)
	{
		die "check_layers: $layers_file names $f twice\n" if exists $rank{$f};
		$rank{$f} = scalar @lines;
		push @layers, $f;
	}
	push @lines, join(' ', @peers);
}
close $lf;
die "check_layers: $layers_file names no layer\n" unless @layers;

# Our files: every .c and .h under SRC (generated headers included).
my (@files, %unit_of, %dir_of);
find(
	{
		no_chdir => 1,
		wanted => sub {
			return unless -f $_ && /\.[ch]$/;
			my $rel = File::Spec->abs2rel($_, $src);
			push @files, $rel;
		}
	},
	$src);
@files = sort @files;
sub unit_name
{
	my ($f) = @_;
	$f =~ s/\.[ch]$//;
	# NAME_int.h belongs to NAME.c: what it shares with its own folder only
	$f =~ s/_int$// if $f =~ /_int$/ && -f "$src/" . substr($f, 0, -4) . ".c";
	return $f;
}
sub layer_of
{
	my ($u) = @_;
	my $d = dirname($u);
	return $d;
}

my %deps;       # unit -> unit -> [ why ... ]
my @breaches;
my %units;
$units{ unit_name($_) } = 1 for @files;

# Includes: "x.h" resolved beside the file, then from SRC and each layer
# folder (the build's -I list), as the compiler would.
my %by_path = map { $_ => 1 } @files;
for my $f (@files)
{
	open my $fh, '<', "$src/$f" or die "check_layers: $src/$f: $!\n";
	while (my $line = <$fh>)
	{
		next unless $line =~ /^\s*#\s*include\s+"([^"]+)"/;
		my $h = $1;
		my $target;
		for my $dir (dirname($f), '.', @layers)
		{
			my $p = File::Spec->canonpath($dir eq '.' ? $h : "$dir/$h");
			if ($by_path{$p}) { $target = $p; last }
		}
		next unless defined $target;    # not ours
		my ($a, $b) = (unit_name($f), unit_name($target));
		push @breaches, "private: $f includes $h, which is for the files of " . dirname($target) . " only"
		  if $target =~ /_int\.h$/ && dirname($target) ne dirname($f);
		next if $a eq $b;
		push @{ $deps{$a}{$b} }, "$f includes $h";
	}
	close $fh;
}

# Symbols: which object defines what, and what each uses.
my (%defined_by, %undefined, @no_object);
for my $u (sort keys %units)
{
	next unless -f "$src/$u.c";
	my $o = "$src/$u.o";
	if (!-f $o)
	{
		push @no_object, "$u.c";
		next;
	}
	for my $l (`nm -P "$o"`)
	{
		my ($sym, $type) = split ' ', $l;
		next unless defined $type;
		if ($type eq 'U') { $undefined{$u}{$sym} = 1 }
		elsif ($type =~ /^[TDBRCVWG]$/) { $defined_by{$sym} = $u }
	}
}
for my $u (sort keys %undefined)
{
	my %syms;
	for my $sym (keys %{ $undefined{$u} })
	{
		my $d = $defined_by{$sym};
		next unless defined $d && $d ne $u;
		push @{ $syms{$d} }, $sym;
	}
	for my $d (keys %syms)
	{
		my @s = sort @{ $syms{$d} };
		my $more = @s > 4 ? sprintf(' and %d more', @s - 4) : '';
		push @{ $deps{$u}{$d} }, "$u.o uses " . join(', ', @s[ 0 .. ($#s < 3 ? $#s : 3) ]) . $more;
	}
}

# Rule 0: every unit lives in a layer.
for my $u (sort keys %units)
{
	my $l = layer_of($u);
	push @breaches, "$u: its folder \"$l\" is not a layer of $layers_file"
	  unless exists $rank{$l};
}

# Rule 1: nothing upward, nothing sideways.
for my $a (sort keys %deps)
{
	for my $b (sort keys %{ $deps{$a} })
	{
		my ($la, $lb) = (layer_of($a), layer_of($b));
		next unless exists $rank{$la} && exists $rank{$lb};
		my $way = $rank{$lb} > $rank{$la} ? 'upward' : ($rank{$lb} == $rank{$la} && $la ne $lb) ? 'sideways' : undef;
		next unless $way;
		push @breaches, "$way: $a (layer $la) depends on $b (layer $lb): " . join('; ', @{ $deps{$a}{$b} });
	}
}

# Rule 2: no circles (Tarjan's strongly connected components).
my ($index, @stack, %on, %idx, %low, @sccs) = (0);
sub strong
{
	my ($v) = @_;
	$idx{$v} = $low{$v} = $index++;
	push @stack, $v;
	$on{$v} = 1;
	for my $w (sort keys %{ $deps{$v} || {} })
	{
		if (!exists $idx{$w}) { strong($w); $low{$v} = $low{$w} if $low{$w} < $low{$v} }
		elsif ($on{$w}) { $low{$v} = $idx{$w} if $idx{$w} < $low{$v} }
	}
	if ($low{$v} == $idx{$v})
	{
		my @c;
		my $w;
		do { $w = pop @stack; $on{$w} = 0; push @c, $w } while ($w ne $v);
		push @sccs, [ sort @c ] if @c > 1;
	}
	return;
}
for my $v (sort keys %units) { strong($v) unless exists $idx{$v} }
for my $c (@sccs)
{
	my %in = map { $_ => 1 } @$c;
	my @why;
	for my $a (@$c)
	{
		for my $b (sort keys %{ $deps{$a} || {} })
		{
			push @why, "  $a -> $b: " . join('; ', @{ $deps{$a}{$b} }) if $in{$b};
		}
	}
	push @breaches, sprintf("circle of %d units: %s\n%s", scalar(@$c), join(', ', @$c), join("\n", @why));
}

if (@no_object && $strict)
{
	push @breaches, "no object for $_ (run make first)" for @no_object;
}
elsif (@no_object)
{
	print "check_layers: no object for " . join(', ', @no_object) . " (run make first); checked by includes only\n";
}
print "$_\n" for @breaches;
printf "check_layers: %d units in %d layers (%s), %d breaches\n", scalar(keys %units), scalar(@layers),
  join(' < ', @lines), scalar(@breaches);
exit(@breaches ? 1 : 0);
