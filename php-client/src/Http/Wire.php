<?php

declare(strict_types=1);

namespace TransferSidecar\Http;

use TransferSidecar\Exception\ConnectionException;
use TransferSidecar\Exception\InvalidArgumentException;

/**
 * HTTP/1.1 on the wire, as much as talking to the sidecar needs: build a request, read an
 * answer's head, read or copy its body (Content-Length, chunked, or until EOF). Works on any PHP
 * stream, so it is unit tested on php://memory.
 *
 * @internal
 */
final class Wire
{
    public const MAX_HEAD_BYTES = 65536;
    public const CHUNK = 65536;

    /**
     * The bytes of one request. Content-Length is added when there is a body.
     *
     * @param array<string, string> $headers
     */
    public static function request(string $method, string $target, #[\SensitiveParameter] array $headers, ?string $body = null): string
    {
        if (preg_match('/^[A-Z]{1,16}$/D', $method) !== 1) {
            throw new InvalidArgumentException(sprintf('HTTP method %s is not a plain token', json_encode($method)));
        }
        if ($target === '' || $target[0] !== '/' || preg_match('/[\x00-\x20\x7f]/', $target) === 1) {
            throw new InvalidArgumentException(sprintf('request target %s must start with / and contain no spaces or control characters', json_encode($target)));
        }
        $out = $method . ' ' . $target . " HTTP/1.1\r\n";
        foreach ($headers as $name => $value) {
            if (preg_match('/^[A-Za-z0-9-]+$/D', (string) $name) !== 1 || preg_match('/[\x00-\x1f\x7f]/', $value) === 1) {
                throw new InvalidArgumentException(sprintf('header %s is not a valid header', json_encode($name)));
            }
            $out .= $name . ': ' . $value . "\r\n";
        }
        if ($body !== null) {
            $out .= 'Content-Length: ' . strlen($body) . "\r\n";
        }
        return $out . "\r\n" . ($body ?? '');
    }

    /**
     * Reads a status line and headers, skipping interim 1xx answers.
     * Returns null when the stream ends before the first byte of the answer: the peer closed the
     * connection without answering (e.g. an idle keep-alive connection it had already closed).
     *
     * @param resource $stream
     */
    public static function readHead($stream): ?Response
    {
        $first = true;
        for (;;) {
            $lines = self::readHeadLines($stream, $first);
            if ($lines === null) {
                return null;
            }
            $first = false;
            $response = self::parseHead($lines);
            if ($response->status >= 200 || $response->status === 101) {
                return $response;
            }
        }
    }

    /**
     * @param list<string> $lines status line, then header lines, without line ends
     */
    public static function parseHead(array $lines): Response
    {
        [$version, $status, $reason] = self::parseStatusLine($lines[0] ?? '');
        $headers = [];
        foreach (array_slice($lines, 1) as $line) {
            [$name, $value] = self::parseHeaderLine($line);
            $headers[$name] = isset($headers[$name]) ? $headers[$name] . ', ' . $value : $value;
        }
        return new Response($version, $status, $reason, $headers);
    }

    /** @return array{0: string, 1: int, 2: string} version, status, reason */
    public static function parseStatusLine(string $line): array
    {
        if (preg_match('#^HTTP/(1\.[01]) ([1-9][0-9]{2})(?: ([^\r\n]*))?$#', $line, $m) !== 1) {
            throw new ConnectionException(sprintf('not an HTTP/1.x status line: %s', json_encode(substr($line, 0, 100))));
        }
        return [$m[1], (int) $m[2], $m[3] ?? ''];
    }

    /** @return array{0: string, 1: string} lower-cased name, value */
    public static function parseHeaderLine(string $line): array
    {
        if (preg_match('/^([!#$%&\'*+.^_`|~0-9A-Za-z-]+):[ \t]*(.*?)[ \t]*$/', $line, $m) !== 1) {
            throw new ConnectionException(sprintf('malformed header line: %s', json_encode(substr($line, 0, 100))));
        }
        return [strtolower($m[1]), $m[2]];
    }

    /**
     * How the body of this answer is delimited: "none", "length", "chunked" or "eof".
     */
    public static function framing(Response $response, string $method): string
    {
        if ($method === 'HEAD' || $response->status < 200 || $response->status === 204 || $response->status === 304) {
            return 'none';
        }
        $te = $response->header('transfer-encoding');
        if ($te !== null && str_contains(strtolower($te), 'chunked')) {
            return 'chunked';
        }
        return $response->header('content-length') !== null ? 'length' : 'eof';
    }

    /** @param resource $stream */
    public static function readBody($stream, Response $response, string $method): string
    {
        $body = '';
        self::copyBody($stream, $response, $method, static function (string $chunk) use (&$body): bool {
            $body .= $chunk;
            return true;
        });
        return $body;
    }

    /**
     * Passes the body to $sink in pieces of at most CHUNK bytes; stops early when $sink returns
     * false. Returns the number of body bytes passed.
     *
     * @param resource $stream
     * @param callable(string): bool $sink
     */
    public static function copyBody($stream, Response $response, string $method, callable $sink): int
    {
        switch (self::framing($response, $method)) {
            case 'none':
                return 0;
            case 'length':
                $length = $response->header('content-length');
                if (preg_match('/^[0-9]{1,18}$/D', (string) $length) !== 1) {
                    throw new ConnectionException(sprintf('invalid Content-Length %s', json_encode($length)));
                }
                return self::copyExactly($stream, (int) $length, $sink);
            case 'chunked':
                return self::copyChunked($stream, $sink);
            default:
                return self::copyToEof($stream, $sink);
        }
    }

    /**
     * @param resource $stream
     * @param callable(string): bool $sink
     */
    private static function copyExactly($stream, int $length, callable $sink, bool &$stopped = false): int
    {
        $copied = 0;
        while ($copied < $length) {
            $chunk = @fread($stream, min(self::CHUNK, $length - $copied));
            // A read that returns some bytes can still have waited read_timeout for more.
            self::throwIfTimedOut($stream);
            if ($chunk === false || $chunk === '') {
                throw new ConnectionException(sprintf('the connection closed after %d of %d body bytes', $copied, $length));
            }
            $copied += strlen($chunk);
            if ($sink($chunk) === false) {
                $stopped = true;
                return $copied;
            }
        }
        return $copied;
    }

    /**
     * @param resource $stream
     * @param callable(string): bool $sink
     */
    private static function copyChunked($stream, callable $sink): int
    {
        $copied = 0;
        for (;;) {
            $line = self::readLine($stream);
            if (preg_match('/^([0-9A-Fa-f]{1,15})[ \t]*(?:;.*)?$/', $line, $m) !== 1) {
                throw new ConnectionException(sprintf('malformed chunk size line %s', json_encode(substr($line, 0, 100))));
            }
            $size = (int) hexdec($m[1]);
            if ($size === 0) {
                while (self::readLine($stream) !== '') {
                    // trailer fields are ignored
                }
                return $copied;
            }
            $stopped = false;
            $copied += self::copyExactly($stream, $size, $sink, $stopped);
            if ($stopped) {
                return $copied;
            }
            if (self::readLine($stream) !== '') {
                throw new ConnectionException('a chunk is not followed by CRLF');
            }
        }
    }

    /**
     * @param resource $stream
     * @param callable(string): bool $sink
     */
    private static function copyToEof($stream, callable $sink): int
    {
        $copied = 0;
        while (!feof($stream)) {
            $chunk = @fread($stream, self::CHUNK);
            self::throwIfTimedOut($stream);
            if ($chunk === false || $chunk === '') {
                continue;
            }
            $copied += strlen($chunk);
            if ($sink($chunk) === false) {
                return $copied;
            }
        }
        return $copied;
    }

    /**
     * @param resource $stream
     * @return list<string>|null null at EOF before any byte (only when $allowEmpty)
     */
    private static function readHeadLines($stream, bool $allowEmpty): ?array
    {
        $lines = [];
        $total = 0;
        for (;;) {
            $line = @fgets($stream, self::MAX_HEAD_BYTES + 1);
            if ($line === false || !str_ends_with($line, "\n")) {
                self::throwIfTimedOut($stream);
                $got = $total + ($line === false ? 0 : strlen($line));
                if ($got === 0 && $allowEmpty) {
                    return null;
                }
                throw new ConnectionException($got === 0
                    ? 'the connection closed before the answer'
                    : sprintf('the connection closed inside the answer head (after %d bytes)', $got));
            }
            $total += strlen($line);
            if ($total > self::MAX_HEAD_BYTES) {
                throw new ConnectionException(sprintf('answer head over %d bytes', self::MAX_HEAD_BYTES));
            }
            $line = rtrim($line, "\r\n");
            if ($line === '') {
                if ($lines === []) {
                    continue; // RFC 9112 §2.2: ignore empty lines before the status line
                }
                return $lines;
            }
            $lines[] = $line;
        }
    }

    /** @param resource $stream */
    private static function readLine($stream): string
    {
        $line = @fgets($stream, 8192);
        if ($line === false || !str_ends_with($line, "\n")) {
            self::throwIfTimedOut($stream);
            throw new ConnectionException('the connection closed inside a chunked body');
        }
        return rtrim($line, "\r\n");
    }

    /** @param resource $stream */
    public static function throwIfTimedOut($stream): void
    {
        $meta = stream_get_meta_data($stream);
        if ($meta['timed_out'] ?? false) {
            throw new ConnectionException('read timed out waiting for the daemon');
        }
    }
}
