<?php

declare(strict_types=1);

namespace TransferSidecar\Tests\Unit;

use PHPUnit\Framework\TestCase;
use TransferSidecar\Exception\ConnectionException;
use TransferSidecar\Exception\InvalidArgumentException;
use TransferSidecar\Http\Response;
use TransferSidecar\Http\Wire;

final class WireTest extends TestCase
{
    /** @return resource */
    private static function stream(string $bytes)
    {
        $s = fopen('php://memory', 'w+b');
        fwrite($s, $bytes);
        rewind($s);
        return $s;
    }

    public function testBuildsTheRequestBytes(): void
    {
        $body = '{"id":"abcdefghijklmnopqrstuv"}';
        self::assertSame(
            "POST /v1/jobs HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nConnection: keep-alive\r\n"
            . "Content-Length: 31\r\n\r\n" . $body,
            Wire::request('POST', '/v1/jobs', ['Host' => 'localhost', 'Content-Type' => 'application/json', 'Connection' => 'keep-alive'], $body)
        );
        self::assertSame("GET /v1/jobs/x?wait=1.5 HTTP/1.1\r\nHost: localhost\r\n\r\n", Wire::request('GET', '/v1/jobs/x?wait=1.5', ['Host' => 'localhost']));
        self::assertStringContainsString("Content-Length: 0\r\n", Wire::request('POST', '/x', [], ''));
    }

    /** @return iterable<string, array{0: string, 1: string, 2: array<string, string>}> */
    public static function badRequests(): iterable
    {
        yield 'header injection in a value' => ['GET', '/x', ['X-A' => "a\r\nX-Evil: 1"]];
        yield 'bad header name' => ['GET', '/x', ['X A' => 'b']];
        yield 'space in target' => ['GET', '/a b', []];
        yield 'CRLF in target' => ['GET', "/a\r\nHost: evil", []];
        yield 'relative target' => ['GET', 'v1/jobs', []];
        yield 'bad method' => ['get jobs', '/x', []];
    }

    /**
     * @dataProvider badRequests
     * @param array<string, string> $headers
     */
    public function testRefusesMalformedRequests(string $method, string $target, array $headers): void
    {
        $this->expectException(InvalidArgumentException::class);
        Wire::request($method, $target, $headers);
    }

    public function testParsesStatusLinesAndHeaders(): void
    {
        self::assertSame(['1.1', 202, 'Accepted'], Wire::parseStatusLine('HTTP/1.1 202 Accepted'));
        self::assertSame(['1.0', 200, ''], Wire::parseStatusLine('HTTP/1.0 200'));
        self::assertSame(['1.1', 404, 'Not Found'], Wire::parseStatusLine('HTTP/1.1 404 Not Found'));
        self::assertSame(['content-type', 'application/json; charset=utf-8'], Wire::parseHeaderLine('Content-Type:  application/json; charset=utf-8 '));
        self::assertSame(['x-empty', ''], Wire::parseHeaderLine('X-Empty:'));
        foreach (['HTTP/2 200 OK', 'HTTP/1.1 20 OK', 'SSH-2.0-OpenSSH', ''] as $bad) {
            try {
                Wire::parseStatusLine($bad);
                self::fail('accepted ' . $bad);
            } catch (ConnectionException) {
                $this->addToAssertionCount(1);
            }
        }
        $this->expectException(ConnectionException::class);
        Wire::parseHeaderLine(' folded continuation');
    }

    public function testReadsAHeadThenAContentLengthBodyLeavingTheNextAnswer(): void
    {
        $first = "HTTP/1.1 202 Accepted\r\nContent-Type: application/json\r\nLocation: /v1/jobs/abc\r\n"
            . "Set-Thing: a\r\nset-thing: b\r\nKeep-Alive: timeout=5\r\nContent-Length: 36\r\n\r\n"
            . '{"id":"abcdefgh","state":"queued"}  ';
        $s = self::stream($first . "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}");
        $r = Wire::readHead($s);
        self::assertInstanceOf(Response::class, $r);
        self::assertSame(202, $r->status);
        self::assertSame('Accepted', $r->reason);
        self::assertSame('/v1/jobs/abc', $r->header('Location'));
        self::assertSame('a, b', $r->header('set-thing'));
        self::assertTrue($r->keepAlive());
        self::assertSame(5, $r->keepAliveTimeout());
        self::assertSame('length', Wire::framing($r, 'POST'));
        $r = $r->withBody(Wire::readBody($s, $r, 'POST'));
        self::assertSame(['id' => 'abcdefgh', 'state' => 'queued'], $r->json());

        $second = Wire::readHead($s);
        self::assertSame(200, $second->status);
        self::assertFalse($second->keepAlive());
        self::assertSame('{}', Wire::readBody($s, $second, 'GET'));
        self::assertNull(Wire::readHead($s), 'EOF before any byte of an answer');
    }

    public function testSkipsInterim1xxAnswers(): void
    {
        $s = self::stream("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n");
        $r = Wire::readHead($s);
        self::assertSame(201, $r->status);
        self::assertSame('', Wire::readBody($s, $r, 'PUT'));
    }

    public function testEofInsideTheHeadOrBodyIsAConnectionException(): void
    {
        foreach (["HTTP/1.1 202 Acc", "HTTP/1.1 202 Accepted\r\nContent-Le", "HTTP/1.1 202 Accepted\r\n"] as $cut) {
            try {
                Wire::readHead(self::stream($cut));
                self::fail('accepted ' . json_encode($cut));
            } catch (ConnectionException $e) {
                self::assertStringContainsString('closed', $e->getMessage());
            }
        }
        $s = self::stream("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n12345");
        $r = Wire::readHead($s);
        $this->expectException(ConnectionException::class);
        $this->expectExceptionMessage('after 5 of 10 body bytes');
        Wire::readBody($s, $r, 'GET');
    }

    public function testFramingOfBodiesWithoutContentLength(): void
    {
        $s = self::stream("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nTrailer: x\r\n\r\nNEXT");
        $r = Wire::readHead($s);
        self::assertSame('chunked', Wire::framing($r, 'GET'));
        self::assertSame('hello world', Wire::readBody($s, $r, 'GET'));
        self::assertSame('NEXT', fread($s, 10), 'the chunked body ends where it says');

        $s = self::stream("HTTP/1.0 200 OK\r\n\r\nuntil the end");
        $r = Wire::readHead($s);
        self::assertSame('eof', Wire::framing($r, 'GET'));
        self::assertFalse($r->keepAlive(), 'HTTP/1.0 without keep-alive');
        self::assertSame('until the end', Wire::readBody($s, $r, 'GET'));

        $r = Wire::readHead(self::stream("HTTP/1.1 204 No Content\r\n\r\n"));
        self::assertSame('none', Wire::framing($r, 'DELETE'));
        $r = Wire::readHead(self::stream("HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n"));
        self::assertSame('none', Wire::framing($r, 'HEAD'));
    }

    public function testCopyBodyStreamsInBoundedPiecesAndStopsWhenTheSinkDoes(): void
    {
        $body = random_bytes(200000);
        $s = self::stream("HTTP/1.1 200 OK\r\nContent-Length: 200000\r\n\r\n" . $body);
        $r = Wire::readHead($s);
        $pieces = [];
        $n = Wire::copyBody($s, $r, 'GET', static function (string $c) use (&$pieces): bool {
            $pieces[] = $c;
            return true;
        });
        self::assertSame(200000, $n);
        self::assertSame($body, implode('', $pieces));
        self::assertLessThanOrEqual(Wire::CHUNK, max(array_map('strlen', $pieces)));

        $s = self::stream("HTTP/1.1 200 OK\r\nContent-Length: 200000\r\n\r\n" . $body);
        $r = Wire::readHead($s);
        self::assertSame(Wire::CHUNK, Wire::copyBody($s, $r, 'GET', static fn (string $c): bool => false));
    }

    public function testErrorBodies(): void
    {
        $r = new Response('1.1', 400, 'Bad Request', [], '{"error":{"code":"UNKNOWN_TARGET","message":"no target named \"x\""}}');
        self::assertSame(['code' => 'UNKNOWN_TARGET', 'message' => 'no target named "x"'], $r->error());
        $r = new Response('1.1', 502, 'Bad Gateway', [], '<html>oops</html>');
        self::assertSame('HTTP_502', $r->error()['code']);
        self::assertNull($r->json());
    }
}
