<?php

declare(strict_types=1);

namespace TransferSidecar\Tests\Unit;

use PHPUnit\Framework\TestCase;
use TransferSidecar\Client;
use TransferSidecar\Exception\InvalidArgumentException;
use TransferSidecar\Exception\SidecarException;

final class ClientOptionsTest extends TestCase
{
    /** @return iterable<string, array{0: array<string, mixed>, 1: string}> */
    public static function badOptions(): iterable
    {
        yield 'unknown key' => [['sokcet' => '/run/x.sock'], 'sokcet'];
        yield 'socket and host' => [['socket' => '/run/x.sock', 'host' => '127.0.0.1'], 'socket'];
        yield 'socket and port' => [['socket' => '/run/x.sock', 'port' => 8765], 'socket'];
        yield 'empty socket' => [['socket' => ''], 'socket'];
        yield 'socket not a string' => [['socket' => 5], 'socket'];
        yield 'port as string' => [['port' => '8765'], 'port'];
        yield 'port 0' => [['port' => 0], 'port'];
        yield 'port too big' => [['port' => 65536], 'port'];
        yield 'host with a path' => [['host' => 'localhost/x'], 'host'];
        yield 'host with a newline' => [['host' => "localhost\n"], 'host'];
        yield 'token with a space' => [['token' => 'Bearer abc'], 'token'];
        yield 'token with CRLF' => [['token' => "abc\r\nX-Evil: 1"], 'token'];
        yield 'empty token' => [['token' => ''], 'token'];
        yield 'connect_timeout 0' => [['connect_timeout' => 0], 'connect_timeout'];
        yield 'read_timeout negative' => [['read_timeout' => -1.0], 'read_timeout'];
        yield 'read_timeout string' => [['read_timeout' => '5'], 'read_timeout'];
        yield 'read_timeout NAN' => [['read_timeout' => NAN], 'read_timeout'];
        yield 'spool missing' => [['spool' => '/nonexistent/spool'], 'spool'];
        yield 'spool empty' => [['spool' => ''], 'spool'];
        yield 'protocol unknown' => [['protocol' => 'grpc'], 'protocol'];
        yield 'protocol not a string' => [['protocol' => true], 'protocol'];
        yield 'persistent not a bool' => [['persistent' => 1], 'persistent'];
        yield 'persistent over http' => [['persistent' => true, 'protocol' => 'http'], 'persistent'];
        yield 'empty handoff_socket' => [['handoff_socket' => ''], 'handoff_socket'];
        yield 'handoff_socket not a string' => [['handoff_socket' => 5], 'handoff_socket'];
        yield 'handoff_socket over http' => [['handoff_socket' => '/run/h.sock', 'protocol' => 'http'], 'handoff_socket'];
    }

    public function testAHandOffSocketOfNullIsNone(): void
    {
        $this->expectNotToPerformAssertions();
        new Client(['socket' => '/run/x.sock', 'handoff_socket' => null]); // as the README's default
        new Client(['socket' => '/run/x.sock', 'handoff_socket' => null, 'protocol' => 'http']);
    }

    /**
     * A spool PHP cannot write to is refused when the client is made, not found out at the first
     * daemon outage (as a SpoolException, the job lost). Root may write anywhere, so as root the
     * check runs as nobody, on a copy of the library nobody can read.
     */
    public function testASpoolThisUserCannotWriteIsRefusedAtOnce(): void
    {
        $dir = sys_get_temp_dir() . '/sidecar-ro-' . bin2hex(random_bytes(6));
        mkdir($dir . '/spool', 0755, true);
        chmod($dir, 0755);
        // A copy of the library and of the examples' autoloader (bootstrap.php), readable by nobody.
        foreach (['src', 'examples/bootstrap.php'] as $part) {
            @mkdir(dirname($dir . '/php-client/' . $part), 0755, true);
            exec(sprintf('cp -R %s %s', escapeshellarg(realpath(__DIR__ . '/../../' . $part)), escapeshellarg($dir . '/php-client/' . $part)), $_, $code);
            self::assertSame(0, $code);
        }
        exec('chmod -R a+rX ' . escapeshellarg($dir . '/php-client')); // whatever the umask
        $php = sprintf('require %s; ', var_export($dir . '/php-client/examples/bootstrap.php', true))
            . sprintf('try { new TransferSidecar\Client(["spool" => %s]); echo "accepted"; } catch (TransferSidecar\Exception\InvalidArgumentException $e) { echo $e->getMessage(); }', var_export($dir . '/spool', true));
        try {
            $asRoot = function_exists('posix_geteuid') && posix_geteuid() === 0;
            if (!$asRoot) {
                chmod($dir . '/spool', 0555);
            }
            $out = (string) shell_exec(($asRoot ? 'runuser -u nobody -- ' : '') . escapeshellarg(PHP_BINARY) . ' -r ' . escapeshellarg($php) . ' 2>&1');
            self::assertStringStartsWith('spool:', $out);
            self::assertStringContainsString('is not writable by this PHP user', $out);
        } finally {
            chmod($dir . '/spool', 0755);
            exec('rm -rf ' . escapeshellarg($dir));
        }
    }

    /**
     * @dataProvider badOptions
     * @param array<string, mixed> $options
     */
    public function testRefusesBadOptionsNamingTheKey(array $options, string $key): void
    {
        try {
            new Client($options);
            self::fail('accepted ' . json_encode($options));
        } catch (InvalidArgumentException $e) {
            self::assertInstanceOf(\InvalidArgumentException::class, $e);
            self::assertInstanceOf(SidecarException::class, $e);
            self::assertStringStartsWith($key . ':', $e->getMessage());
        }
    }

    /**
     * With zend.exception_ignore_args=Off (PHP's built-in default, php.ini-development), an
     * exception's getTrace() keeps every argument in full, and error trackers (Sentry, Whoops,
     * Monolog's normalizers) record them: the token must not be among them.
     */
    public function testTheTokenIsNotInTheArgumentsOfExceptionTraces(): void
    {
        if (PHP_VERSION_ID < 80200) {
            self::markTestSkipped('#[\\SensitiveParameter] needs PHP 8.2 (8.1 ignores it)');
        }
        $token = 'a-secret-token-0123456789';
        $previous = ini_set('zend.exception_ignore_args', '0');
        $dir = sys_get_temp_dir() . '/sidecar-trace-' . bin2hex(random_bytes(6));
        mkdir($dir, 0700);
        $server = stream_socket_server('unix://' . $dir . '/s.sock');
        try {
            // A bad option (a spool directory not mounted yet, say) while the token is given.
            try {
                new Client(['socket' => $dir . '/s.sock', 'token' => $token, 'spool' => $dir . '/missing']);
                self::fail('no exception');
            } catch (InvalidArgumentException $e) {
                self::assertFalse(str_contains(print_r($e->getTrace(), true), $token), 'the token is in the arguments of Client::__construct() in the trace');
            }
            // A write that fails: the daemon closed the connection before reading the request.
            $connection = \TransferSidecar\Http\Connection::open('unix://' . $dir . '/s.sock', 1.0);
            fclose(stream_socket_accept($server, 1.0));
            try {
                for ($i = 0; $i < 10; $i++) {
                    $connection->write("POST /v1/jobs HTTP/1.1\r\nAuthorization: Bearer $token\r\n\r\n");
                    usleep(10000);
                }
                self::fail('no exception');
            } catch (\TransferSidecar\Exception\ConnectionException $e) {
                self::assertFalse(str_contains(print_r($e->getTrace(), true), $token), 'the token is in the arguments of Connection::write() in the trace');
            }
        } finally {
            ini_set('zend.exception_ignore_args', (string) $previous);
            fclose($server);
            @unlink($dir . '/s.sock');
            rmdir($dir);
        }
    }

    public function testAcceptsGoodOptions(): void
    {
        self::assertInstanceOf(Client::class, new Client());
        self::assertInstanceOf(Client::class, new Client(['socket' => '/run/transfer-sidecar/sidecar.sock', 'token' => 'a-long-token-0123456789', 'spool' => sys_get_temp_dir()]));
        self::assertInstanceOf(Client::class, new Client(['host' => '::1', 'port' => 1, 'connect_timeout' => 1, 'read_timeout' => 0.25, 'spool' => null, 'token' => null, 'protocol' => 'http']));
    }

    /** @return iterable<string, array{0: array<string, mixed>, 1: string}> */
    public static function badJobOptions(): iterable
    {
        yield 'unknown job option' => [['overwirte' => true], 'overwirte'];
        yield 'overwrite as string' => [['overwrite' => 'yes'], 'overwrite'];
        yield 'short sha256' => [['sha256' => 'abc'], 'sha256'];
        yield 'sha256 with a newline' => [['sha256' => str_repeat('a', 64) . "\n"], 'sha256'];
        yield 'unknown digest' => [['digest' => 'md5'], 'digest'];
        yield 'callback not a URL' => [['callback' => '/hooks/done'], 'callback'];
        yield 'callback with a space' => [['callback' => 'http://127.0.0.1/a b'], 'callback'];
        yield 'id too short' => [['id' => 'abc'], 'id'];
        yield 'id with a slash' => [['id' => 'abcdefgh/ij'], 'id'];
        yield 'id not a string' => [['id' => 12345678], 'id'];
    }

    /**
     * Checked before any connection: the socket here does not exist.
     *
     * @dataProvider badJobOptions
     * @param array<string, mixed> $options
     */
    public function testRefusesBadJobOptionsBeforeConnecting(array $options, string $key): void
    {
        $client = new Client(['socket' => '/nonexistent/sidecar.sock']);
        $this->expectException(InvalidArgumentException::class);
        $this->expectExceptionMessageMatches('/^' . preg_quote($key, '/') . ':/');
        $client->upload('local', '/srv/a', '/a', $options);
    }

    public function testRefusesBadArgumentsBeforeConnecting(): void
    {
        $client = new Client(['socket' => '/nonexistent/sidecar.sock']);
        $cases = [
            'direction' => static fn () => $client->send('sideways', 'local', '/srv/a', '/a'),
            'id' => static fn () => $client->status('../../metrics'),
            'timeout' => static fn () => $client->wait(str_repeat('a', 22), 301),
        ];
        foreach ($cases as $key => $call) {
            try {
                $call();
                self::fail($key . ' accepted');
            } catch (InvalidArgumentException $e) {
                self::assertStringStartsWith($key . ':', $e->getMessage());
            }
        }
        try {
            $client->upload('local', "/srv/\xff.bin", '/a');
            self::fail('invalid UTF-8 accepted');
        } catch (InvalidArgumentException $e) {
            self::assertStringContainsString('UTF-8', $e->getMessage());
        }
    }

    public function testStreamUrlEncodesTargetAndEachSegment(): void
    {
        self::assertSame('/v1/stream/files/2026/a%20b.bin', Client::streamUrl('files', '/2026/a b.bin'));
        self::assertSame('/v1/stream/hdfs/a/b', Client::streamUrl('hdfs', 'a//b/'));
        self::assertSame('/v1/stream/my.target/%3Fq%3D1/%23frag/100%25/%C3%A4%2B.txt', Client::streamUrl('my.target', '/?q=1/#frag/100%/ä+.txt'));
        self::assertSame('/v1/stream/a%2Fb/x', Client::streamUrl('a/b', '/x'));
        self::assertSame('/v1/stream/t/a/b', Client::streamUrl('t', '/./a/./b'), '"." segments dropped, as the daemon does');
        foreach (['/..', '/a/../../etc/passwd', 'a/..'] as $remote) {
            try {
                Client::accelRedirectHeader('t', $remote);
                self::fail($remote . ' accepted');
            } catch (InvalidArgumentException $e) {
                self::assertSame('remote: must not contain ".." segments', $e->getMessage(), 'nginx would resolve it before the daemon sees it');
            }
        }
    }

    public function testAccelRedirectHeader(): void
    {
        self::assertSame('X-Accel-Redirect: /sidecar-stream/files/2026/a%20b.bin', Client::accelRedirectHeader('files', '/2026/a b.bin'));
        self::assertSame('X-Accel-Redirect: /internal/hdfs/x%0Ay', Client::accelRedirectHeader('hdfs', '/x' . "\n" . 'y', '/internal/'));
        $this->expectException(InvalidArgumentException::class);
        Client::accelRedirectHeader('files', '/a', "/x\r\nSet-Cookie: a=b");
    }

    public function testStreamUrlNeedsAFile(): void
    {
        $this->expectException(InvalidArgumentException::class);
        Client::streamUrl('files', '/');
    }
}
