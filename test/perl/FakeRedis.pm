# FakeRedis: a loopback server that answers like Redis until asked to lie.
#
# It runs test/perl/fake_redis.pl, which answers the set-up commands (PING,
# AUTH, SELECT, HELLO, CLIENT, INFO, ROLE) as Redis 7 would, and script calls
# and DEL with the replies the test chooses, byte for byte.
#
#   use FakeRedis;
#   my $fake = FakeRedis->start;
#   my $node = SlidewinTest::new_node('n', $fake->port);
#   $fake->script(FakeRedis::ints(1, 99, 0, ...));   # every script call
#   $fake->script($good, "+OK\r\n");                 # the first, then the rest
#   $fake->script({ silence => 1 });                 # never answers
#   $fake->script({ stream => "\$99999999999\r\n", chunk => 'x' x 4096 });
#   $fake->del(":1\r\n");                            # the reply to DEL
#   $fake->reply('SENTINEL', $first, $rest);         # any other command
#   my @ids = $fake->script_connections;  # connection of each script call
#
# Replies given as strings are sent as they are; see fake_redis.pl for the
# other forms.  The server is stopped when the script ends.
package FakeRedis;

use strict;
use warnings;

use Carp;
use Data::Dumper;
use IO::Socket::INET;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Time::HiRes qw(usleep);
use SlidewinTest;

my @all;

sub start
{
	my ($class) = @_;
	my $dir  = PostgreSQL::Test::Utils::tempdir('fake_redis');
	my $self = bless {
		port    => SlidewinTest::free_port(),
		control => "$dir/control.pl",
		log     => "$dir/events.log",
		gen     => 0,
	}, $class;
	$self->_write({ script => [] });
	open(my $fh, '>', $self->{log}) or croak "cannot create $self->{log}: $!";
	close $fh;

	my $script = SlidewinTest::src_dir() . '/test/perl/fake_redis.pl';
	$self->{harness} = IPC::Run::start(
		[ $^X, $script, $self->{port}, $self->{control}, $self->{log} ],
		'<', \undef, '>>', "$dir/stdout.log", '2>>', "$dir/stderr.log");
	push @all, $self;

	# Ready when it answers PING.
	my $deadline = time + 10;
	while (time < $deadline)
	{
		my $sock = IO::Socket::INET->new(
			PeerAddr => '127.0.0.1',
			PeerPort => $self->{port},
			Timeout  => 1);
		if ($sock)
		{
			print $sock "PING\r\n";
			my $line = <$sock>;
			close $sock;
			if (defined $line && $line eq "+PONG\r\n")
			{
				$self->{log_offset} = 0;
				return $self;
			}
		}
		usleep(50_000);
	}
	croak "fake redis on port $self->{port} did not come up:\n"
	  . PostgreSQL::Test::Utils::slurp_file("$dir/stderr.log");
}

sub port { return $_[0]->{port} }

# Pack integers into an array reply, as a script returns them.
sub ints
{
	return '*' . scalar(@_) . "\r\n" . join('', map { ":$_\r\n" } @_);
}

sub _as_reply
{
	my ($r) = @_;
	return ref $r ? $r : { raw => $r };
}

sub _write
{
	my ($self, $c) = @_;
	$c->{gen} = ++$self->{gen};
	local $Data::Dumper::Useqq    = 1;
	local $Data::Dumper::Terse    = 1;
	local $Data::Dumper::Sortkeys = 1;
	my $tmp = "$self->{control}.tmp";
	open(my $fh, '>', $tmp) or croak "cannot write $tmp: $!";
	print $fh Dumper($c);
	close $fh or croak "cannot write $tmp: $!";
	rename($tmp, $self->{control}) or croak "cannot rename $tmp: $!";
	$self->{current} = $c;
	return;
}

# The replies to the next script calls; the last one repeats.
sub script
{
	my ($self, @replies) = @_;
	my %c = %{ $self->{current} };
	$c{script} = [ map { _as_reply($_) } @replies ];
	$self->_write(\%c);
	return;
}

# The replies to the next commands named $name (upper case), in turn; the
# last one repeats. With no replies, the command gets its usual answer.
sub reply
{
	my ($self, $name, @replies) = @_;
	my %c = %{ $self->{current} };
	$c{replies} = { %{ $c{replies} // {} }, $name => [ map { _as_reply($_) } @replies ] };
	$self->_write(\%c);
	return;
}

# RESP text of an array of bulk strings, as a sentinel names a master.
sub bulks
{
	return '*' . scalar(@_) . "\r\n" . join('', map { '$' . length($_) . "\r\n$_\r\n" } @_);
}

sub del
{
	my ($self, $reply) = @_;
	my %c = %{ $self->{current} };
	$c{del} = _as_reply($reply);
	$self->_write(\%c);
	return;
}

# Events since the last call of mark(): lines of the event log.
sub mark
{
	my ($self) = @_;
	$self->{log_offset} = -s $self->{log};
	return;
}

sub events
{
	my ($self) = @_;
	my $all = PostgreSQL::Test::Utils::slurp_file($self->{log});
	return split /\n/, substr($all, $self->{log_offset});
}

# Since mark(): the connection ID of each script call, in order.
sub script_connections
{
	my ($self) = @_;
	return map { /^cmd (\d+) (?:EVALSHA|EVAL) / ? ($1) : () } $self->events;
}

# Since mark(): how many commands named $name arrived.
sub count
{
	my ($self, $name) = @_;
	return scalar grep { /^cmd \d+ \Q$name\E / } $self->events;
}

sub stop
{
	my ($self) = @_;
	return unless $self->{harness};
	$self->{harness}->kill_kill;
	delete $self->{harness};
	return;
}

END
{
	my $exit_code = $?;
	$_->stop foreach @all;
	$? = $exit_code;
}

1;
