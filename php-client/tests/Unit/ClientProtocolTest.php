<?php

declare(strict_types=1);

namespace TransferSidecar\Tests\Unit;

use PHPUnit\Framework\TestCase;
use TransferSidecar\Client;
use TransferSidecar\Exception\ConnectionException;
use TransferSidecar\Exception\JobNotFoundException;
use TransferSidecar\Exception\RequestException;
use TransferSidecar\Exception\UnavailableException;
use TransferSidecar\Tests\Support\StubServer;

/**
 * The client against a scripted server on a unix socket: what it sends, how it reads answers,
 * keep-alive and reconnects, and when it spools.
 */
final class ClientProtocolTest extends TestCase
{
    private string $spool;

    protected function setUp(): void
    {
        $this->spool = sys_get_temp_dir() . '/sidecar-unit-spool-' . bin2hex(random_bytes(6));
        mkdir($this->spool, 0700);
    }

    protected function tearDown(): void
    {
        array_map('unlink', glob($this->spool . '/{,.}*.json', GLOB_BRACE) ?: []);
        array_map('unlink', glob($this->spool . '/.tmp-*') ?: []);
        rmdir($this->spool);
    }

    private static function accepted(string $id = StubServer::REQUEST_ID): string
    {
        return StubServer::answer(202, 'Accepted', json_encode(['id' => $id, 'state' => 'queued']), ['Keep-Alive' => 'timeout=5']);
    }

    /** @return list<string> */
    private function spooled(): array
    {
        return array_values(array_diff(scandir($this->spool), ['.', '..']));
    }

    public function testSendsOneHttp11RequestAndReturnsItsOwnIdOn202(): void
    {
        $stub = new StubServer([[['reply' => self::accepted()]]]);
        $client = new Client(['protocol' => 'http', 'socket' => $stub->socket, 'token' => 'secret-token-0123456789']);
        $id = $client->upload('hdfs', '/var/www/uploads/a.bin', '/2026/a.bin', ['overwrite' => true, 'sha256' => str_repeat('AB', 32), 'callback' => 'http://127.0.0.1:8080/hooks/x']);
        $client->close();
        [$request] = $stub->finish();

        self::assertMatchesRegularExpression('/^[A-Za-z0-9_-]{22}$/', $id);
        self::assertStringStartsWith("POST /v1/jobs HTTP/1.1\r\n", $request['head']);
        foreach (['Host: localhost', 'Content-Type: application/json', 'Connection: keep-alive', 'Authorization: Bearer secret-token-0123456789', 'Content-Length: ' . strlen($request['body'])] as $line) {
            self::assertStringContainsString("\r\n" . $line . "\r\n", $request['head']);
        }
        self::assertSame([
            'id' => $id, 'direction' => 'upload', 'target' => 'hdfs', 'local' => '/var/www/uploads/a.bin', 'remote' => '/2026/a.bin',
            'overwrite' => true, 'sha256' => str_repeat('ab', 32), 'callback' => 'http://127.0.0.1:8080/hooks/x',
        ], json_decode($request['body'], true));
        self::assertGreaterThan(0, $client->lastHandoffSeconds());
    }

    public function testSendsTheCallersOwnIdWhenGiven(): void
    {
        $stub = new StubServer([[['reply' => self::accepted('order-4711-upload')]]]);
        $client = new Client(['protocol' => 'http', 'socket' => $stub->socket]);
        $id = $client->upload('hdfs', '/var/www/uploads/a.bin', '/a.bin', ['id' => 'order-4711-upload']);
        $client->close();
        [$request] = $stub->finish();
        self::assertSame('order-4711-upload', $id);
        self::assertSame('order-4711-upload', json_decode($request['body'], true)['id']);
    }

    public function testReusesOneConnectionForManyCalls(): void
    {
        $job = json_encode(['id' => 'abcdefgh', 'state' => 'succeeded']);
        $stub = new StubServer([[
            ['reply' => self::accepted()],
            ['reply' => StubServer::answer(200, 'OK', json_encode(['id' => StubServer::REQUEST_ID, 'state' => 'queued']))],
            ['reply' => StubServer::answer(200, 'OK', $job)],
            ['reply' => StubServer::answer(200, 'OK', $job)],
            ['reply' => StubServer::answer(202, 'Accepted', '{"accepted":true}')],
        ]]);
        $client = new Client(['protocol' => 'http', 'socket' => $stub->socket]);
        $client->upload('local', '/srv/a', '/a');
        $client->download('local', '/srv/b', '/b');
        self::assertSame('succeeded', $client->status('abcdefgh')['state']);
        self::assertSame('succeeded', $client->wait('abcdefgh', 2.5)['state']);
        $client->observe(['type' => 'handoff', 'transport' => 'unix', 'acked' => true, 'seconds' => 0.0001]);
        $client->close();
        $requests = $stub->finish();

        self::assertSame([0, 0, 0, 0, 0], array_column($requests, 'conn'), 'all on the first connection');
        self::assertStringStartsWith("GET /v1/jobs/abcdefgh HTTP/1.1\r\n", $requests[2]['head']);
        self::assertStringNotContainsString('Content-Length', $requests[2]['head']);
        self::assertStringStartsWith("GET /v1/jobs/abcdefgh?wait=2.5 HTTP/1.1\r\n", $requests[3]['head']);
        self::assertStringStartsWith("POST /v1/observations HTTP/1.1\r\n", $requests[4]['head']);
    }

    /** @dataProvider protocols */
    public function testReconnectsOnceWhenAReusedConnectionWasClosed(string $protocol): void
    {
        // The first connection ends after one answer, as an idle keep-alive connection does.
        $reply = $protocol === 'http' ? self::accepted() : self::acceptedLine();
        $stub = new StubServer([[['reply' => $reply]], [['reply' => $reply]]]);
        $client = new Client(['protocol' => $protocol, 'socket' => $stub->socket, 'spool' => $this->spool]);
        $first = $client->upload('local', '/srv/a', '/a');
        usleep(100000);
        $second = $client->upload('local', '/srv/b', '/b');
        $client->close();
        $requests = $stub->finish();

        self::assertSame([0, 1], array_column($requests, 'conn'));
        self::assertSame($first, json_decode($requests[0]['body'], true)['id']);
        self::assertSame($second, json_decode($requests[1]['body'], true)['id']);
        self::assertSame([], $this->spooled(), 'the retry went to the daemon, not to the spool');
    }

    /** A call refused before any hand-off (an invalid option) leaves no earlier hand-off's time behind. */
    public function testLastHandoffSecondsIsNullAfterACallRefusedBeforeTheHandOff(): void
    {
        $stub = new StubServer([[['reply' => self::acceptedLine()]]]);
        $client = new Client(['socket' => $stub->socket]);
        $client->upload('hdfs', '/srv/a', '/a');
        self::assertGreaterThan(0, $client->lastHandoffSeconds());
        foreach ([fn () => $client->upload('hdfs', '/srv/a', '/a', ['sha256' => 'nope']), fn () => $client->send('sideways', 'hdfs', '/srv/a', '/a'), fn () => $client->download('hdfs', '/srv/a', '/a', ['digest' => 'md5'])] as $call) {
            try {
                $call();
                self::fail('no exception');
            } catch (\TransferSidecar\Exception\InvalidArgumentException $e) {
                self::assertNull($client->lastHandoffSeconds(), $e->getMessage());
            }
        }
        $client->close();
        $stub->finish();
    }

    public function testA4xxThrowsWithTheDaemonsCodeAndIsNotSpooled(): void
    {
        $stub = new StubServer([[['reply' => StubServer::error(400, 'Bad Request', 'UNKNOWN_TARGET', 'no target named "nope"')]]]);
        $client = new Client(['protocol' => 'http', 'socket' => $stub->socket, 'spool' => $this->spool]);
        try {
            $client->upload('nope', '/srv/a', '/a');
            self::fail('no exception');
        } catch (RequestException $e) {
            self::assertSame(400, $e->getStatus());
            self::assertSame('UNKNOWN_TARGET', $e->getErrorCode());
            self::assertStringContainsString('no target named "nope"', $e->getMessage());
            self::assertMatchesRegularExpression('/^[A-Za-z0-9_-]{22}$/', (string) $e->getJobId());
        }
        self::assertNull($client->lastHandoffSeconds(), 'a call that threw handed nothing off: observeLastHandoff() must not report it');
        $client->close();
        $stub->finish();
        self::assertSame([], $this->spooled());
    }

    public function testAnOptionSetToNullIsLeftOutAsInTheDaemonsApi(): void
    {
        $stub = new StubServer([[['reply' => self::accepted()]]]);
        $client = new Client(['protocol' => 'http', 'socket' => $stub->socket]);
        $id = $client->upload('local', '/srv/a', '/a', ['id' => null, 'overwrite' => null, 'sha256' => null, 'callback' => null]);
        $client->close();
        [$request] = $stub->finish();
        self::assertSame(['id' => $id, 'direction' => 'upload', 'target' => 'local', 'local' => '/srv/a', 'remote' => '/a'], json_decode($request['body'], true));
    }

    /** @return iterable<string, array{0: list<list<array<string, mixed>>>}> */
    public static function unavailable(): iterable
    {
        yield '503 SHUTTING_DOWN' => [[[['reply' => StubServer::error(503, 'Service Unavailable', 'SHUTTING_DOWN', 'stopping', ['Retry-After' => '1'])]]]];
        yield '429 QUEUE_FULL' => [[[['reply' => StubServer::error(429, 'Too Many Requests', 'QUEUE_FULL', 'full', ['Retry-After' => '1'])]]]];
        yield '500 without JSON' => [[[['reply' => StubServer::answer(500, 'Internal Server Error', 'oops', ['Content-Type' => 'text/plain'])]]]];
        yield 'closed without answering' => [[[['close' => true]]]];
        yield 'closed inside the head' => [[[['reply' => "HTTP/1.1 202 Acc"]]]];
        // Something other than the daemon answered: a proxy's login page, another service.
        yield '200 that is not the daemon\'s answer for this job' => [[[['reply' => StubServer::answer(200, 'OK', '<html>proxy login</html>', ['Content-Type' => 'text/html'])]]]];
        yield '202 naming another job' => [[[['reply' => StubServer::answer(202, 'Accepted', json_encode(['id' => 'another-job-id', 'state' => 'queued']))]]]];
        yield '404 without the daemon\'s error body' => [[[['reply' => StubServer::answer(404, 'Not Found', 'not here', ['Content-Type' => 'text/plain'])]]]];
    }

    /**
     * @dataProvider unavailable
     * @param list<list<array<string, mixed>>> $script
     */
    public function testSpoolsWhenTheDaemonCannotTakeTheJob(array $script): void
    {
        $stub = new StubServer($script);
        $client = new Client(['protocol' => 'http', 'socket' => $stub->socket, 'spool' => $this->spool]);
        $id = $client->upload('hdfs', '/srv/a', '/a', ['overwrite' => false]);
        $client->close();
        [$request] = $stub->finish();

        self::assertSame([$id . '.json'], $this->spooled());
        self::assertSame($request['body'], file_get_contents($this->spool . '/' . $id . '.json'), 'the spool holds exactly the body that was POSTed');
    }

    /**
     * @dataProvider unavailable
     * @param list<list<array<string, mixed>>> $script
     */
    public function testWithoutASpoolTheFailureIsThrown(array $script): void
    {
        $stub = new StubServer($script);
        $client = new Client(['protocol' => 'http', 'socket' => $stub->socket]);
        try {
            $client->upload('hdfs', '/srv/a', '/a');
            self::fail('no exception');
        } catch (UnavailableException $e) {
            self::assertContains($e->getStatus(), [200, 202, 404, 429, 500, 503]);
            if ($e->getStatus() === 429 || $e->getStatus() === 503) {
                self::assertSame(1, $e->getRetryAfter());
            } elseif ($e->getStatus() !== 202) {
                self::assertSame('HTTP_' . $e->getStatus(), $e->getErrorCode());
            }
        } catch (ConnectionException $e) {
            self::assertStringContainsString('closed', $e->getMessage());
        }
        $client->close();
        $stub->finish();
    }

    /** @return iterable<string, array{0: string}> */
    public static function protocols(): iterable
    {
        yield 'http' => ['http'];
        yield 'lines' => ['lines'];
    }

    /** @dataProvider protocols */
    public function testAReadTimeoutSpoolsInsteadOfHanging(string $protocol): void
    {
        $stub = new StubServer([[['silent' => 1.0]]]);
        $client = new Client(['protocol' => $protocol, 'socket' => $stub->socket, 'spool' => $this->spool, 'read_timeout' => 0.2]);
        $id = $client->upload('hdfs', '/srv/a', '/a');
        self::assertLessThan(0.9, $client->lastHandoffSeconds());
        $client->close();
        $stub->finish();
        self::assertSame([$id . '.json'], $this->spooled());
    }

    /** handOffAll(): a daemon that does not answer costs one read_timeout for the window, not one per job. */
    public function testABatchTheDaemonDoesNotAnswerIsSpooledAfterOneReadTimeout(): void
    {
        $stub = new StubServer([[['silent' => 3.0]]]);
        $client = new Client(['socket' => $stub->socket, 'spool' => $this->spool, 'read_timeout' => 0.3]);
        $jobs = array_map(static fn (int $i): array => ['direction' => 'upload', 'target' => 'hdfs', 'local' => "/srv/$i", 'remote' => "/$i"], range(1, 6));
        $started = hrtime(true);
        $ids = $client->handOffAll($jobs);
        $seconds = (hrtime(true) - $started) / 1e9;
        $client->close();
        $stub->finish();
        self::assertContainsOnly('string', $ids);
        $expected = array_map(static fn (string $id): string => "$id.json", $ids);
        $spooled = $this->spooled();
        sort($expected);
        sort($spooled);
        self::assertSame($expected, $spooled);
        // Each job alone would wait for its own read_timeout again: 7 × 0.3 s.
        self::assertLessThan(1.2, $seconds);
    }

    /** handOffAll(): a new connection closed before any answer is not tried again (it was, without end). */
    public function testABatchWhoseNewConnectionClosesUnansweredIsSpooled(): void
    {
        $stub = new StubServer([[['close' => true]], [['close' => true]]]);
        $client = new Client(['socket' => $stub->socket, 'spool' => $this->spool]);
        $jobs = array_map(static fn (int $i): array => ['direction' => 'upload', 'target' => 'hdfs', 'local' => "/srv/$i", 'remote' => "/$i"], range(1, 3));
        $ids = $client->handOffAll($jobs);
        $single = $client->upload('hdfs', '/srv/single', '/single'); // the stub's second connection
        $client->close();
        $requests = $stub->finish();
        self::assertContainsOnly('string', $ids);
        self::assertSame([0, 1], array_column($requests, 'conn'));
        self::assertSame(['/1', '/single'], array_map(static fn (array $r): string => json_decode($r['body'], true)['remote'], $requests));
        $expected = array_map(static fn (string $id): string => "$id.json", [...$ids, $single]);
        $spooled = $this->spooled();
        sort($expected);
        sort($spooled);
        self::assertSame($expected, $spooled);
    }

    public function testAStallInsideABodyTimesOutAfterReadTimeout(): void
    {
        // The head and 6 of 100 body bytes, then silence: the read that got the 6 bytes already
        // waited read_timeout for more, so the client must give up then, not wait a second time.
        $partial = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"id\":";
        $stub = new StubServer([[['reply' => $partial, 'pause' => 2.0]]]);
        $client = new Client(['protocol' => 'http', 'socket' => $stub->socket, 'read_timeout' => 0.5]);
        $started = hrtime(true);
        try {
            $client->status('abcdefghij');
            self::fail('no exception');
        } catch (ConnectionException $e) {
            self::assertStringContainsString('read timed out', $e->getMessage());
        }
        self::assertLessThan(0.9, (hrtime(true) - $started) / 1e9); // 1.0 s when it waited twice
        $client->close();
        $stub->finish();
    }

    public function testARequestOverTheDaemonsBodyLimitIsRefusedBeforeSendingAndNotSpooled(): void
    {
        $client = new Client(['socket' => $this->spool . '/no.sock', 'spool' => $this->spool]);
        $spooled = $client->upload('hdfs', '/srv/a', '/a'); // handed off to the spool
        self::assertGreaterThan(0, $client->lastHandoffSeconds());
        try {
            $client->upload('hdfs', '/srv/a', '/' . str_repeat('a', 70000));
            self::fail('no exception');
        } catch (RequestException $e) {
            self::assertSame([413, 'PAYLOAD_TOO_LARGE'], [$e->getStatus(), $e->getErrorCode()]);
        }
        self::assertNull($client->lastHandoffSeconds(), 'not the time of the call before');
        self::assertSame([$spooled . '.json'], $this->spooled());
    }

    public function testADeadSocketPathSpoolsAtOnce(): void
    {
        $client = new Client(['socket' => $this->spool . '/no.sock', 'spool' => $this->spool]);
        $id = $client->upload('hdfs', '/srv/a', '/a');
        self::assertSame([$id . '.json'], $this->spooled());
        $this->expectException(ConnectionException::class);
        (new Client(['socket' => $this->spool . '/no.sock']))->upload('hdfs', '/srv/a', '/a');
    }

    public function testStatusWaitCancelErrors(): void
    {
        $stub = new StubServer([[
            ['reply' => StubServer::error(404, 'Not Found', 'JOB_NOT_FOUND', 'no job "abcdefghij"')],
            ['reply' => StubServer::error(409, 'Conflict', 'JOB_FINISHED', 'job abcdefghij already succeeded')],
            ['reply' => StubServer::error(503, 'Service Unavailable', 'SHUTTING_DOWN', 'stopping')],
        ]]);
        $client = new Client(['protocol' => 'http', 'socket' => $stub->socket]);
        try {
            $client->status('abcdefghij');
            self::fail('no exception');
        } catch (JobNotFoundException $e) {
            self::assertSame([404, 'JOB_NOT_FOUND', 'abcdefghij'], [$e->getStatus(), $e->getErrorCode(), $e->getJobId()]);
        }
        try {
            $client->cancel('abcdefghij');
            self::fail('no exception');
        } catch (RequestException $e) {
            self::assertNotInstanceOf(JobNotFoundException::class, $e);
            self::assertSame('JOB_FINISHED', $e->getErrorCode());
        }
        try {
            $client->wait('abcdefghij', 0);
            self::fail('no exception');
        } catch (UnavailableException $e) {
            self::assertSame('SHUTTING_DOWN', $e->getErrorCode());
        }
        $client->close();
        $requests = $stub->finish();
        self::assertStringStartsWith("DELETE /v1/jobs/abcdefghij HTTP/1.1\r\n", $requests[1]['head']);
        self::assertStringStartsWith("GET /v1/jobs/abcdefghij?wait=0 HTTP/1.1\r\n", $requests[2]['head']);
    }

    public function testObserveNeverThrows(): void
    {
        $stub = new StubServer([[['reply' => StubServer::error(400, 'Bad Request', 'INVALID_REQUEST', 'unknown field')]], [['close' => true]]]);
        $client = new Client(['protocol' => 'http', 'socket' => $stub->socket]);
        $client->observe(['type' => 'nonsense']);
        $client->observe(['type' => 'nonsense']);
        (new Client(['socket' => $this->spool . '/no.sock']))->observe(['type' => 'transfer']);
        $client->close();
        self::assertCount(2, $stub->finish());
    }

    public function testSendWritesConnectionCloseAndDoesNotRead(): void
    {
        $stub = new StubServer([[['close' => true]]]);
        $client = new Client(['protocol' => 'http', 'socket' => $stub->socket]);
        $id = $client->send('download', 'files', '/srv/b', '/b');
        [$request] = $stub->finish();
        self::assertStringContainsString("\r\nConnection: close\r\n", $request['head']);
        self::assertStringNotContainsString('keep-alive', $request['head']);
        self::assertSame($id, json_decode($request['body'], true)['id']);
        self::assertSame('download', json_decode($request['body'], true)['direction']);
    }

    private static function acceptedLine(string $id = StubServer::REQUEST_ID): string
    {
        return json_encode(['status' => 202, 'id' => $id, 'state' => 'queued']) . "\n";
    }

    public function testLinesIsTheDefaultAndSendsTheTokenLineOnceThenOneJobLinePerCall(): void
    {
        $stub = new StubServer([[['reply' => "{\"status\":200}\n"], ['reply' => self::acceptedLine()], ['reply' => self::acceptedLine()]]]);
        $client = new Client(['socket' => $stub->socket, 'token' => 'secret-token-0123456789']);
        $first = $client->upload('hdfs', '/var/www/uploads/a.bin', '/2026/a.bin', ['overwrite' => true]);
        $second = $client->download('hdfs', '/var/www/b.bin', '/b.bin');
        $client->close();
        $requests = $stub->finish();

        self::assertSame([0, 0, 0], array_column($requests, 'conn'), 'one connection');
        self::assertSame(['', '', ''], array_column($requests, 'head'));
        self::assertSame('{"token":"secret-token-0123456789"}', $requests[0]['body']);
        self::assertSame(['id' => $first, 'direction' => 'upload', 'target' => 'hdfs', 'local' => '/var/www/uploads/a.bin', 'remote' => '/2026/a.bin', 'overwrite' => true], json_decode($requests[1]['body'], true));
        self::assertSame($second, json_decode($requests[2]['body'], true)['id']);
        self::assertGreaterThan(0, $client->lastHandoffSeconds());
    }

    /**
     * With handoff_socket, job lines go to that socket (the daemon's hand-off thread) and the rest
     * to host/port; the hand-off's observation names the transport the lines took.
     */
    public function testJobLinesGoToTheHandOffSocketAndTheirObservationSaysUnix(): void
    {
        $lines = new StubServer([[['reply' => self::acceptedLine()]]]);
        $api = stream_socket_server('tcp://127.0.0.1:0', $errno, $error);
        self::assertNotFalse($api, $error);
        $port = (int) substr((string) strrchr((string) stream_socket_get_name($api, false), ':'), 1);
        $client = new Client(['host' => '127.0.0.1', 'port' => $port, 'handoff_socket' => $lines->socket, 'read_timeout' => 0.2]);
        $id = $client->upload('hdfs', '/var/www/uploads/a.bin', '/a.bin');
        $client->observeLastHandoff(); // to host/port, which this test answers with silence
        $client->close();
        [$request] = $lines->finish();
        self::assertSame($id, json_decode($request['body'], true)['id']);
        $conn = stream_socket_accept($api, 1.0);
        self::assertNotFalse($conn);
        stream_set_timeout($conn, 1);
        $observation = '';
        while (!str_contains($observation, '}') && !feof($conn) && ($chunk = fread($conn, 65536)) !== false && $chunk !== '') {
            $observation .= $chunk;
        }
        self::assertStringStartsWith('POST /v1/observations HTTP/1.1', $observation);
        self::assertStringContainsString('"transport":"unix"', $observation); // was: "tcp"
    }

    public function testLinesA4xxThrowsWithTheDaemonsCodeAndIsNotSpooled(): void
    {
        $stub = new StubServer([[['reply' => '{"status":400,"error":{"code":"UNKNOWN_TARGET","message":"no target named \"nope\""}}' . "\n"]]]);
        $client = new Client(['socket' => $stub->socket, 'spool' => $this->spool]);
        try {
            $client->upload('nope', '/srv/a', '/a');
            self::fail('no exception');
        } catch (RequestException $e) {
            self::assertSame([400, 'UNKNOWN_TARGET'], [$e->getStatus(), $e->getErrorCode()]);
            self::assertStringContainsString('no target named "nope"', $e->getMessage());
        }
        $client->close();
        $stub->finish();
        self::assertSame([], $this->spooled());
    }

    /** @return iterable<string, array{0: string|null, 1: int|null}> */
    public static function linesUnavailable(): iterable
    {
        yield '429 QUEUE_FULL' => ['{"status":429,"error":{"code":"QUEUE_FULL","message":"full"},"retryAfter":1}' . "\n", 429];
        yield '503 SHUTTING_DOWN' => ['{"status":503,"error":{"code":"SHUTTING_DOWN","message":"stopping"},"retryAfter":1}' . "\n", 503];
        yield '202 naming another job' => [self::acceptedLine('another-job-id'), 202];
        yield 'an HTTP answer (not the daemon: unavailable, as over HTTP)' => [StubServer::answer(400, 'Bad Request', 'no'), 0];
        yield 'a line cut short' => ['{"status":20', null];
        yield 'closed without answering' => [null, null];
    }

    /** @dataProvider linesUnavailable */
    public function testLinesSpoolsWhenTheDaemonCannotTakeTheJob(?string $reply, ?int $status): void
    {
        $stub = new StubServer([[$reply === null ? ['close' => true] : ['reply' => $reply]]]);
        $client = new Client(['socket' => $stub->socket]);
        try {
            $client->upload('hdfs', '/srv/a', '/a');
            self::fail('no exception');
        } catch (UnavailableException $e) {
            self::assertSame($status, $e->getStatus());
            if ($status === 429 || $status === 503) {
                self::assertSame(1, $e->getRetryAfter());
            }
        } catch (ConnectionException $e) {
            self::assertNull($status, $e->getMessage());
        }
        $client->close();
        $stub->finish();

        $stub = new StubServer([[$reply === null ? ['close' => true] : ['reply' => $reply]]]);
        $client = new Client(['socket' => $stub->socket, 'spool' => $this->spool]);
        $id = $client->upload('hdfs', '/srv/a', '/a');
        $client->close();
        [$request] = $stub->finish();
        self::assertSame([$id . '.json'], $this->spooled());
        self::assertSame($request['body'], file_get_contents($this->spool . '/' . $id . '.json'), 'the spool holds exactly the line that was sent');
    }

    public function testPersistentKeepsTheLineConnectionForTheWorkersNextClient(): void
    {
        // Two clients one after the other in one process, as two requests of one php-fpm worker.
        $stub = new StubServer([[['reply' => "{\"status\":200}\n"], ['reply' => self::acceptedLine()], ['reply' => "{\"status\":200}\n"], ['reply' => self::acceptedLine()]]]);
        $options = ['socket' => $stub->socket, 'token' => 'secret-token-0123456789', 'persistent' => true];
        $first = (new Client($options))->upload('hdfs', '/var/www/a.bin', '/a.bin');
        $client = new Client($options);
        $second = $client->upload('hdfs', '/var/www/b.bin', '/b.bin');
        $client->close(); // closes the kept connection too
        $requests = $stub->finish();

        self::assertSame([0, 0, 0, 0], array_column($requests, 'conn'), 'one connection for both clients');
        // Each client authenticates with its own token, the kept connection's included.
        self::assertSame(['{"token":"secret-token-0123456789"}', '{"token":"secret-token-0123456789"}'], [$requests[0]['body'], $requests[2]['body']]);
        self::assertSame([$first, $second], [json_decode($requests[1]['body'], true)['id'], json_decode($requests[3]['body'], true)['id']]);
    }

    public function testPersistentReplacesAKeptConnectionWithAnUnreadAnswerInIt(): void
    {
        // The first request's answer comes with a second line nobody asked for, as the answer an
        // interrupted request never read would wait in the kept connection.
        $stray = json_encode(['status' => 202, 'id' => 'strayJobIdOfAnotherOne', 'state' => 'queued']) . "\n";
        // Had the second job been written on that connection, the stub would read and log it there.
        $stub = new StubServer([[['reply' => self::acceptedLine() . $stray], ['reply' => self::acceptedLine()]], [['reply' => self::acceptedLine()]]]);
        $options = ['socket' => $stub->socket, 'persistent' => true, 'spool' => $this->spool];
        $first = (new Client($options))->upload('hdfs', '/var/www/a.bin', '/a.bin');
        usleep(100000);
        $client = new Client($options);
        $second = $client->upload('hdfs', '/var/www/b.bin', '/b.bin');
        $client->close();
        $requests = $stub->finish();

        self::assertSame([0, 1], array_column($requests, 'conn'), 'the second job on a new connection');
        self::assertSame($second, json_decode($requests[1]['body'], true)['id']);
        self::assertNotSame($first, $second);
        self::assertSame([], $this->spooled());
    }

    public function testAnAnswerNamingAnotherJobIsNeverTakenAndTheJobIsSentAgain(): void
    {
        $other = json_encode(['status' => 202, 'id' => 'strayJobIdOfAnotherOne', 'state' => 'queued']) . "\n";
        $stub = new StubServer([[['reply' => self::acceptedLine()], ['reply' => $other]], [['reply' => self::acceptedLine()]]]);
        $client = new Client(['socket' => $stub->socket, 'spool' => $this->spool]);
        $client->upload('hdfs', '/var/www/a.bin', '/a.bin');
        $second = $client->upload('hdfs', '/var/www/b.bin', '/b.bin');
        $client->close();
        $requests = $stub->finish();

        self::assertSame([0, 0, 1], array_column($requests, 'conn'));
        self::assertSame([$second, $second], [json_decode($requests[1]['body'], true)['id'], json_decode($requests[2]['body'], true)['id']], 'the same job, sent again');
        self::assertSame([], $this->spooled());
    }

    public function testAClientSurvivesAnotherClientOfTheWorkerClosingTheSharedPersistentConnection(): void
    {
        // PHP hands the same persistent stream to every Client of the process with that address.
        $stub = new StubServer([[['reply' => self::acceptedLine()], ['reply' => self::acceptedLine()]], [['reply' => self::acceptedLine()]]]);
        $options = ['socket' => $stub->socket, 'persistent' => true, 'spool' => $this->spool];
        $a = new Client($options);
        $a->upload('hdfs', '/srv/a', '/a');
        $b = new Client($options);
        $b->upload('hdfs', '/srv/b', '/b');
        $a->close(); // closes the stream $b holds too
        $third = $b->upload('hdfs', '/srv/c', '/c'); // before: a TypeError from fwrite()
        $b->close();
        $requests = $stub->finish();

        self::assertSame([0, 0, 1], array_column($requests, 'conn'), 'the third job on a new connection');
        self::assertSame($third, json_decode($requests[2]['body'], true)['id']);
        self::assertSame([], $this->spooled());
    }

    public function testAnErrorHandlerThatThrowsDoesNotStopTheRetryOfAConnectionTheDaemonClosed(): void
    {
        $stub = new StubServer([[['reply' => self::acceptedLine()]], [['reply' => self::acceptedLine()]]]);
        $client = new Client(['socket' => $stub->socket, 'spool' => $this->spool]);
        // As many frameworks' handlers do, for errors silenced with @ too.
        set_error_handler(static function (int $level, string $message, string $file, int $line): bool {
            throw new \ErrorException($message, 0, $level, $file, $line);
        });
        try {
            $client->upload('hdfs', '/srv/a', '/a');
            usleep(100000); // the daemon has closed the kept connection: the next write is a broken pipe
            $second = $client->upload('hdfs', '/srv/b', '/b'); // before: ErrorException, nothing spooled
        } finally {
            restore_error_handler();
        }
        $client->close();
        $requests = $stub->finish();

        self::assertSame([0, 1], array_column($requests, 'conn'));
        self::assertSame($second, json_decode($requests[1]['body'], true)['id']);
        self::assertSame([], $this->spooled());
    }

    public function testOnAReusedConnectionARefusalThatDoesNotNameTheJobIsNotTakenAsItsAnswer(): void
    {
        // A refusal without an id waiting on the kept connection (another request's, left unread)
        // is not this job's; the daemon names the job in its refusals, so a refusal naming it is.
        $stray = json_encode(['status' => 400, 'error' => ['code' => 'UNKNOWN_TARGET', 'message' => 'no target slow-bad']]) . "\n";
        $ours = json_encode(['status' => 400, 'id' => StubServer::REQUEST_ID, 'error' => ['code' => 'UNKNOWN_TARGET', 'message' => 'no target nope']]) . "\n";
        $stub = new StubServer([[['reply' => self::acceptedLine()], ['reply' => $stray]], [['reply' => self::acceptedLine()], ['reply' => $ours]]]);
        $client = new Client(['socket' => $stub->socket, 'spool' => $this->spool]);
        $client->upload('hdfs', '/srv/a', '/a');
        $second = $client->upload('hdfs', '/srv/b', '/b'); // before: RequestException UNKNOWN_TARGET (slow-bad)
        try {
            $client->upload('nope', '/srv/c', '/c');
            self::fail('a refusal naming the job is its answer');
        } catch (RequestException $e) {
            self::assertSame('UNKNOWN_TARGET', $e->getErrorCode());
        }
        $client->close();
        $requests = $stub->finish();

        self::assertSame([0, 0, 1, 1], array_column($requests, 'conn'), 'the second job sent again, on a new connection; the third not');
        self::assertSame([$second, $second], [json_decode($requests[1]['body'], true)['id'], json_decode($requests[2]['body'], true)['id']]);
        self::assertSame([], $this->spooled());
    }

    public function testSecretsAreSensitiveParametersWhereverTheyArePassed(): void
    {
        $sensitive = static fn (string $class, string $method, int $at): bool =>
            (new \ReflectionMethod($class, $method))->getParameters()[$at]->getAttributes(\SensitiveParameter::class) !== [];
        self::assertTrue($sensitive(Client::class, 'sent', 1), 'the request written, token line or Authorization header included');
        self::assertTrue($sensitive(\TransferSidecar\Signature::class, 'sign', 1));
        self::assertTrue($sensitive(\TransferSidecar\Signature::class, 'verify', 3));
    }

    public function testLinesSendWritesTheLineAndDoesNotRead(): void
    {
        $stub = new StubServer([[['close' => true]]]);
        $client = new Client(['socket' => $stub->socket]);
        $id = $client->send('download', 'files', '/srv/b', '/b');
        [$request] = $stub->finish();
        self::assertSame('', $request['head']);
        self::assertSame(['id' => $id, 'direction' => 'download', 'target' => 'files', 'local' => '/srv/b', 'remote' => '/b'], json_decode($request['body'], true));
    }

    public function testPassthruCopiesTheBodyAndKeepsTheConnection(): void
    {
        $body = random_bytes(300000);
        $stub = new StubServer([[
            ['reply' => StubServer::answer(206, 'Partial Content', $body, ['Content-Type' => 'application/octet-stream', 'Content-Range' => 'bytes 0-299999/400000', 'Accept-Ranges' => 'bytes'])],
            ['reply' => StubServer::error(404, 'Not Found', 'REMOTE_NOT_FOUND', '/x does not exist')],
            ['reply' => StubServer::answer(200, 'OK', 'whole', ['Content-Type' => 'application/octet-stream'])],
        ]]);
        $client = new Client(['protocol' => 'http', 'socket' => $stub->socket]);
        ob_start();
        $n = $client->passthru('files', '/2026/a b.bin', 'bytes=0-299999');
        $out = ob_get_clean();
        self::assertSame(300000, $n);
        self::assertSame($body, $out);

        ob_start();
        $n = $client->passthru('files', '/x');
        $out = ob_get_clean();
        self::assertSame(strlen($out), $n);
        self::assertSame('REMOTE_NOT_FOUND', json_decode($out, true)['error']['code']);

        // A Range that is not a bytes range, straight from a browser, is ignored (RFC 9110 14.2):
        // the whole file, not an exception (a 500 page); and nothing of it reaches the request.
        ob_start();
        $n = $client->passthru('files', '/y', "items=1-2\r\nX-Evil: 1");
        self::assertSame('whole', ob_get_clean());
        $client->close();
        $requests = $stub->finish();
        self::assertSame([0, 0, 0], array_column($requests, 'conn'));
        self::assertStringStartsWith("GET /v1/stream/files/2026/a%20b.bin HTTP/1.1\r\n", $requests[0]['head']);
        self::assertStringContainsString("\r\nRange: bytes=0-299999\r\n", $requests[0]['head']);
        self::assertStringNotContainsString('Range', $requests[2]['head']);
        self::assertStringNotContainsString('X-Evil', $requests[2]['head']);
    }
}
