#!/usr/bin/perl
# test/check_meta.pl [REPO]: META.json, the PGXN distribution metadata, read
# against the PGXN Meta Spec 1.0.0 and against the rest of the repository.
# make test runs it ("meta" in test/run_all.sh).
#
# Checked:
#   - META.json parses as JSON (JSON::PP, core perl)
#   - the keys the spec requires are there: name, abstract, version,
#     maintainer, license, provides, meta-spec; meta-spec.version is 1.0.0
#   - version and provides.slidewin.version are the SemVer form of
#     slidewin.control's default_version (the spec wants three numbers:
#     default_version 1.10 is 1.10.0), so a new release cannot leave META.json
#     behind; provides.slidewin has file and abstract, and file (and docfile,
#     if given) exist
#   - license is one of the spec's names (or an object of name => URL)
#   - prereqs.runtime.requires.PostgreSQL is a SemVer whose major is the
#     lowest one debian/pgversions allows ("15+")
#   - debian/changelog's newest entry has default_version as its upstream
#     version
#   - tags, when given, is a list of non-empty strings
#
# Prints each problem on a line of its own, then "meta: OK" or
# "meta: N problems"; exit status 1 on any problem.
use strict;
use warnings;
use JSON::PP ();

my $repo = shift // '.';
my @problems;
sub problem { push @problems, join('', @_) }

sub slurp {
	my ($path) = @_;
	open my $fh, '<', "$repo/$path" or do { problem("cannot read $path: $!"); return undef };
	local $/;
	my $text = <$fh>;
	close $fh;
	return $text;
}

my $semver = qr/^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?$/;

# default_version of slidewin.control, and its SemVer form
my $control = slurp('slidewin.control') // '';
my ($default_version) = $control =~ /^default_version\s*=\s*'([^']*)'/m;
my $want_semver;
if (!defined $default_version) {
	problem("slidewin.control has no default_version");
} elsif ($default_version !~ /^\d+(\.\d+){0,2}$/) {
	problem("slidewin.control's default_version '$default_version' is not one to three numbers");
} else {
	my @parts = split /\./, $default_version;
	push @parts, 0 while @parts < 3;
	$want_semver = join '.', map { $_ + 0 } @parts;
}

my $text = slurp('META.json');
my $meta;
if (defined $text) {
	$meta = eval { JSON::PP->new->decode($text) };
	problem("META.json is not valid JSON: $@") unless defined $meta;
	problem("META.json is not a JSON object") if defined $meta && ref $meta ne 'HASH';
}
$meta = {} unless ref $meta eq 'HASH';

for my $key (qw(name abstract version maintainer license provides meta-spec)) {
	problem("META.json: required key '$key' missing") unless exists $meta->{$key};
}
for my $key (qw(name abstract)) {
	problem("META.json: $key must be a non-empty string")
	  if exists $meta->{$key} && (ref $meta->{$key} || ($meta->{$key} // '') eq '');
}
problem("META.json: name is '", $meta->{name} // '', "', want 'slidewin'")
  if exists $meta->{name} && ($meta->{name} // '') ne 'slidewin';

my $ms = $meta->{'meta-spec'};
if (exists $meta->{'meta-spec'}) {
	if (ref $ms ne 'HASH') {
		problem("META.json: meta-spec must be an object");
	} else {
		problem("META.json: meta-spec.version is '", $ms->{version} // '', "', want '1.0.0'")
		  unless ($ms->{version} // '') eq '1.0.0';
		problem("META.json: meta-spec.url missing") unless ($ms->{url} // '') =~ m{^https?://};
	}
}

# version, then provides.slidewin
sub check_version {
	my ($where, $v) = @_;
	if (!defined $v || ref $v) {
		problem("META.json: $where must be a string");
		return;
	}
	problem("META.json: $where '$v' is not a SemVer (three numbers: 1.10.0)") unless $v =~ $semver;
	problem("META.json: $where is '$v', but slidewin.control's default_version '$default_version' makes it '$want_semver'")
	  if defined $want_semver && $v ne $want_semver;
}
check_version('version', $meta->{version}) if exists $meta->{version};

my $maint = $meta->{maintainer};
if (exists $meta->{maintainer}) {
	my @m = ref $maint eq 'ARRAY' ? @$maint : ($maint);
	problem("META.json: maintainer must be a string or a list of strings")
	  if !@m || grep { !defined $_ || ref $_ || $_ eq '' } @m;
}

my %licenses = map { $_ => 1 } qw(agpl_3 apache_1_1 apache_2_0 artistic_1 artistic_2 bsd freebsd
  gfdl_1_2 gfdl_1_3 gpl_1 gpl_2 gpl_3 lgpl_2_1 lgpl_3_0 mit mozilla_1_0 mozilla_1_1 openssl
  perl_5 postgresql qpl_1_0 ssleay sun zlib open_source restricted unrestricted unknown);
my $lic = $meta->{license};
if (exists $meta->{license}) {
	if (ref $lic eq 'HASH') {
		problem("META.json: license object is empty") unless %$lic;
		for (sort keys %$lic) {
			problem("META.json: license '$_' must map to a URL") unless ($lic->{$_} // '') =~ m{^https?://};
		}
	} else {
		my @l = ref $lic eq 'ARRAY' ? @$lic : ($lic);
		problem("META.json: license list is empty") unless @l;
		for (@l) {
			problem("META.json: license '", $_ // '', "' is not a name of the spec") unless defined $_ && !ref $_ && $licenses{$_};
		}
	}
}

my $prov = $meta->{provides};
if (exists $meta->{provides}) {
	if (ref $prov ne 'HASH' || ref $prov->{slidewin} ne 'HASH') {
		problem("META.json: provides.slidewin must be an object");
	} else {
		my $p = $prov->{slidewin};
		for my $key (qw(file version abstract)) {
			problem("META.json: provides.slidewin.$key missing") unless defined $p->{$key} && $p->{$key} ne '';
		}
		check_version('provides.slidewin.version', $p->{version}) if defined $p->{version};
		for my $key (qw(file docfile)) {
			next unless defined $p->{$key} && !ref $p->{$key};
			problem("META.json: provides.slidewin.$key '$p->{$key}' does not exist") unless -f "$repo/$p->{$key}";
		}
	}
}

# The lowest PostgreSQL: META.json's prereq and debian/pgversions agree.
my $pg = eval { $meta->{prereqs}{runtime}{requires}{PostgreSQL} };
my $pgversions = slurp('debian/pgversions') // '';
my ($lowest) = $pgversions =~ /^\s*(\d+)\+\s*$/m;
if (!defined $pg || ref $pg) {
	problem("META.json: prereqs.runtime.requires.PostgreSQL missing");
} elsif (!(my ($pg_major) = $pg =~ $semver)) {
	problem("META.json: prereqs.runtime.requires.PostgreSQL '$pg' is not a SemVer");
} elsif (!defined $lowest) {
	problem("debian/pgversions has no line 'NN+' naming the lowest major");
} elsif ($pg_major != $lowest) {
	problem("META.json: prereqs.runtime.requires.PostgreSQL is '$pg', but debian/pgversions starts at $lowest");
}

if (exists $meta->{tags}) {
	my $tags = $meta->{tags};
	problem("META.json: tags must be a non-empty list of non-empty strings")
	  if ref $tags ne 'ARRAY' || !@$tags || grep { !defined $_ || ref $_ || $_ eq '' } @$tags;
}

# debian/changelog: the newest entry's upstream version
my $changelog = slurp('debian/changelog') // '';
my ($deb_version) = $changelog =~ /^slidewin \(([^)]+)\)/;
if (!defined $deb_version) {
	problem("debian/changelog: no first entry 'slidewin (VERSION)'");
} elsif (defined $default_version) {
	(my $upstream = $deb_version) =~ s/^\d+://;
	$upstream =~ s/-[^-]+$//;
	problem("debian/changelog: newest version '$deb_version' has upstream version '$upstream', want default_version '$default_version'")
	  unless $upstream eq $default_version;
}

if (@problems) {
	print "$_\n" for @problems;
	printf "meta: %d problem%s\n", scalar @problems, @problems == 1 ? '' : 's';
	exit 1;
}
print "meta: OK (version $meta->{version}, slidewin.control $default_version, debian/changelog $deb_version)\n";
exit 0;
