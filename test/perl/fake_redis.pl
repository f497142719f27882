#!/usr/bin/perl
# A fake Redis for the TAP scripts: it speaks just enough RESP to let a client
# connect and set itself up, then answers script calls (EVALSHA, EVAL) and DEL
# with whatever the test put in the control file, however wrong.
#
#   perl fake_redis.pl PORT CONTROL_FILE LOG_FILE
#
# The control file is a Perl expression (written by FakeRedis.pm) returning
#   { gen => N, script => [ REPLY, ... ], del => REPLY,
#     replies => { NAME => [ REPLY, ... ] } }
# where REPLY is one of
#   { raw => BYTES }                  send BYTES as they are
#   { silence => 1 }                  never answer again on this connection
#   { stream => BYTES, chunk => BYTES } send BYTES, then CHUNK over and over
#                                     until the client goes away
#   { close => 1 }                    close the connection
# Script calls take the replies of `script` in turn, and the last one is
# repeated; a new gen starts the list over.  `replies` does the same for any
# other command by its name (SENTINEL, ROLE, ...), in place of the answer
# below.  The control file is read again
# on every call, so a test changes the replies without restarting us.
#
# The log file gets one line per event, for the test to read:
#   connect ID            a client connected (IDs count from 1)
#   cmd ID NAME NARGS     a command arrived on connection ID
#   close ID              the client went away
use strict;
use warnings;

use IO::Select;
use IO::Socket::INET;
use POSIX qw(EAGAIN EWOULDBLOCK);

my ($port, $control_file, $log_file) = @ARGV;
die "usage: $0 PORT CONTROL_FILE LOG_FILE\n" unless defined $log_file;

$SIG{PIPE} = 'IGNORE';
$SIG{TERM} = $SIG{INT} = sub { exit 0 };

open(my $log, '>>', $log_file) or die "cannot open $log_file: $!";
$log->autoflush(1);

my $listener = IO::Socket::INET->new(
	LocalAddr => '127.0.0.1',
	LocalPort => $port,
	Listen    => 16,
	ReuseAddr => 1,
	Blocking  => 0) or die "cannot listen on 127.0.0.1:$port: $!";

my %clients;    # fileno => { sock, id, in, out, chunk, mute }
my $select = IO::Select->new($listener);
my $next_id = 1;
my ($seen_gen, $script_index) = (-1, 0);
my %reply_index;    # command name => replies taken since gen $seen_gen

sub bulk { my ($s) = @_; return '$' . length($s) . "\r\n$s\r\n" }

# What a real Redis 7 would say to the set-up commands a client may send.
my %benign = (
	PING   => "+PONG\r\n",
	AUTH   => "+OK\r\n",
	SELECT => "+OK\r\n",
	CLIENT => "+OK\r\n",
	QUIT   => "+OK\r\n",
	ASKING => "+OK\r\n",
	COMMAND => "*0\r\n",
	ROLE   => "*3\r\n" . bulk('master') . ":0\r\n*0\r\n",
	INFO   => bulk("# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n"
		  . "# Replication\r\nrole:master\r\nconnected_slaves:0\r\n"),
	HELLO => "*14\r\n"
	  . bulk('server') . bulk('redis')
	  . bulk('version') . bulk('7.0.15')
	  . bulk('proto') . ":2\r\n"
	  . bulk('id') . ":1\r\n"
	  . bulk('mode') . bulk('standalone')
	  . bulk('role') . bulk('master')
	  . bulk('modules') . "*0\r\n",
);

sub control
{
	my $c = do $control_file;
	return $c if ref $c eq 'HASH';
	return { gen => 0, script => [ { raw => "-ERR fake redis has no control file\r\n" } ] };
}

sub new_gen
{
	my ($c) = @_;
	return if $c->{gen} == $seen_gen;
	($seen_gen, $script_index) = ($c->{gen}, 0);
	%reply_index = ();
	return;
}

# The next of the replies the test chose for command $name, or undef.
sub next_named_reply
{
	my ($name) = @_;
	my $c = control();
	new_gen($c);
	my $list = $c->{replies}{$name} or return undef;
	return undef unless @$list;
	my $i = $reply_index{$name}++ // 0;
	return $list->[ $i < @$list ? $i : $#{$list} ];
}

sub next_script_reply
{
	my $c = control();
	new_gen($c);
	my @list = @{ $c->{script} // [] };
	return { raw => "-ERR fake redis has no script reply\r\n" } unless @list;
	my $i = $script_index < @list ? $script_index : $#list;
	$script_index++;
	return $list[$i];
}

sub drop
{
	my ($cl) = @_;
	print $log "close $cl->{id}\n";
	delete $clients{ fileno($cl->{sock}) };
	$select->remove($cl->{sock});
	close($cl->{sock});
	return;
}

sub answer
{
	my ($cl, $reply) = @_;
	if ($reply->{silence})
	{
		$cl->{mute} = 1;
	}
	elsif ($reply->{close})
	{
		drop($cl);
		return 0;
	}
	elsif (defined $reply->{stream})
	{
		$cl->{out} .= $reply->{stream};
		$cl->{chunk} = $reply->{chunk};
		$cl->{mute} = 1;
	}
	else
	{
		$cl->{out} .= $reply->{raw};
	}
	return 1;
}

# Take the complete commands (RESP arrays of bulk strings, or inline lines)
# off the front of the input and answer each.
sub serve
{
	my ($cl) = @_;
	while (!$cl->{mute})
	{
		my @args;
		my $buf = $cl->{in};
		if ($buf =~ /\A\*(\d+)\r\n/)
		{
			my ($n, $pos) = ($1, length($&));
			my $complete = 1;
			for (1 .. $n)
			{
				if (substr($buf, $pos) =~ /\A\$(\d+)\r\n/)
				{
					my ($len, $hlen) = ($1, length($&));
					if (length($buf) < $pos + $hlen + $len + 2)
					{
						$complete = 0;
						last;
					}
					push @args, substr($buf, $pos + $hlen, $len);
					$pos += $hlen + $len + 2;
				}
				else
				{
					$complete = 0;
					last;
				}
			}
			return unless $complete;
			$cl->{in} = substr($buf, $pos);
		}
		elsif ($buf =~ /\A([^\r\n]*)\r?\n/)
		{
			$cl->{in} = substr($buf, length($&));
			@args = split ' ', $1;
			next unless @args;
		}
		else
		{
			return;
		}

		my $name = uc $args[0];
		print $log "cmd $cl->{id} $name " . scalar(@args) . "\n";
		my $reply = next_named_reply($name);
		if (defined $reply)
		{
		}
		elsif ($name eq 'EVALSHA' || $name eq 'EVAL')
		{
			$reply = next_script_reply();
		}
		elsif ($name eq 'DEL')
		{
			$reply = control()->{del} // { raw => ":0\r\n" };
		}
		elsif (exists $benign{$name})
		{
			$reply = { raw => $benign{$name} };
		}
		else
		{
			$reply = { raw => "-ERR unknown command '$args[0]'\r\n" };
		}
		return unless answer($cl, $reply);
	}
	return;
}

for (;;)
{
	my $wsel = IO::Select->new();
	foreach my $cl (values %clients)
	{
		if (defined $cl->{chunk} && length($cl->{out}) < 65536)
		{
			$cl->{out} .= $cl->{chunk} x (1 + int(65536 / length($cl->{chunk})));
		}
		$wsel->add($cl->{sock}) if length $cl->{out};
	}
	my ($r, $w) = IO::Select->select($select, $wsel, undef, 0.5);

	foreach my $sock (@{ $w // [] })
	{
		my $fd = fileno($sock);
		my $cl = defined $fd && $clients{$fd} or next;
		my $n = syswrite($sock, $cl->{out});
		if (defined $n)
		{
			substr($cl->{out}, 0, $n, '');
		}
		elsif ($! != EAGAIN && $! != EWOULDBLOCK)
		{
			drop($cl);
		}
	}

	foreach my $sock (@{ $r // [] })
	{
		if ($sock == $listener)
		{
			my $new = $listener->accept or next;
			$new->blocking(0);
			my $cl = { sock => $new, id => $next_id++, in => '', out => '' };
			$clients{ fileno($new) } = $cl;
			$select->add($new);
			print $log "connect $cl->{id}\n";
			next;
		}
		my $fd = fileno($sock);
		my $cl = defined $fd && $clients{$fd} or next;
		my $n = sysread($sock, my $data, 65536);
		if (!defined $n && ($! == EAGAIN || $! == EWOULDBLOCK))
		{
			next;
		}
		if (!$n)
		{
			drop($cl);
			next;
		}
		$cl->{in} .= $data;
		serve($cl);
	}
}
