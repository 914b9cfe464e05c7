<?php

declare(strict_types=1);

namespace TransferSidecar\Http;

use TransferSidecar\Exception\ConnectionException;

/**
 * One keep-alive connection to the daemon (unix socket or TCP), as a blocking PHP stream with a
 * read timeout, speaking HTTP or the line protocol. Knows how many answers it carried (so the client can tell a fresh connection
 * from a reused one) and until when the server keeps it open while idle.
 *
 * @internal
 */
final class Connection
{
    /** @var resource|null */
    private $stream;
    private int $answered = 0;
    private ?int $idleUntilNs = null;
    private bool $persistent;

    /** @param resource $stream */
    private function __construct($stream, bool $persistent)
    {
        $this->stream = $stream;
        $this->persistent = $persistent;
    }

    /**
     * @param string $address "unix:///path/sidecar.sock" or "tcp://127.0.0.1:8765"
     * @param bool $persistent kept open by PHP after the request ends, for the next request of the
     *   same worker process (STREAM_CLIENT_PERSISTENT, as php-redis's pconnect): one connection a
     *   worker instead of one a request. PHP hands back a kept one only if it is still open; one
     *   with bytes waiting in it (an answer an interrupted request never read) is closed and
     *   replaced here, so that no answer is ever read for the wrong job.
     */
    public static function open(string $address, float $connectTimeout, bool $persistent = false): self
    {
        $errno = 0;
        $errstr = '';
        $context = str_starts_with($address, 'tcp://')
            ? stream_context_create(['socket' => ['tcp_nodelay' => true]])
            : stream_context_create();
        $flags = STREAM_CLIENT_CONNECT | ($persistent ? STREAM_CLIENT_PERSISTENT : 0);
        for ($attempt = 1; ; $attempt++) {
            $stream = self::quietly(static function () use ($address, &$errno, &$errstr, $connectTimeout, $flags, $context) {
                return @stream_socket_client($address, $errno, $errstr, $connectTimeout, $flags, $context);
            });
            if ($stream === false) {
                throw new ConnectionException(sprintf('cannot connect to %s: %s (errno %d)', $address, $errstr !== '' ? $errstr : 'unknown error', $errno));
            }
            // A kept connection has carried bytes already (its position is past 0).
            $kept = $persistent && ftell($stream) > 0;
            if ($kept && $attempt === 1 && self::hasInput($stream)) {
                self::quietly(static fn () => @fclose($stream));
                continue;
            }
            stream_set_blocking($stream, true);
            $connection = new self($stream, $persistent);
            if ($kept) {
                $connection->answered = 1; // a reused connection: one that fails before an answer is replaced once
            }
            return $connection;
        }
    }

    /** @param resource $stream */
    private static function hasInput($stream): bool
    {
        $read = [$stream];
        $write = null;
        $except = null;
        return self::quietly(static fn () => @stream_select($read, $write, $except, 0)) !== 0;
    }

    public function isOpen(): bool
    {
        return $this->stream !== null;
    }

    /** Whether this connection already carried a complete exchange (so it may have gone stale). */
    public function isReused(): bool
    {
        return $this->answered > 0;
    }

    /** Whether the server has probably closed it for being idle (with a one second margin). */
    public function isIdleExpired(): bool
    {
        return $this->idleUntilNs !== null && hrtime(true) >= $this->idleUntilNs;
    }

    public function write(#[\SensitiveParameter] string $bytes): void
    {
        $stream = $this->stream();
        $length = strlen($bytes);
        for ($written = 0; $written < $length;) {
            error_clear_last();
            $n = self::quietly(static fn () => @fwrite($stream, $written === 0 ? $bytes : substr($bytes, $written)));
            if ($n === false || $n === 0) {
                $error = error_get_last();
                throw new ConnectionException(sprintf('write to the daemon failed after %d of %d bytes%s', $written, $length,
                    $error !== null ? ': ' . $error['message'] : ''));
            }
            $written += $n;
        }
    }

    public function setReadTimeout(float $seconds): void
    {
        $whole = (int) floor($seconds);
        stream_set_timeout($this->stream(), $whole, (int) round(($seconds - $whole) * 1e6));
    }

    /** @see Wire::readHead() null: closed before the first byte of an answer */
    public function readHead(): ?Response
    {
        $stream = $this->stream();
        return self::quietly(static fn () => Wire::readHead($stream));
    }

    public function readBody(Response $response, string $method): string
    {
        $stream = $this->stream();
        return self::quietly(static fn () => Wire::readBody($stream, $response, $method));
    }

    /** @param callable(string): bool $sink */
    public function copyBody(Response $response, string $method, callable $sink): int
    {
        $stream = $this->stream();
        return self::quietly(static fn () => Wire::copyBody($stream, $response, $method, $sink));
    }

    /**
     * One answer line of the line protocol, without its newline; null: closed before its first byte.
     *
     * @throws ConnectionException on a read timeout, or a line cut short
     */
    public function readLine(): ?string
    {
        $stream = $this->stream();
        $line = self::quietly(static fn () => @fgets($stream, 70000));
        if ($line === false || !str_ends_with($line, "\n")) {
            Wire::throwIfTimedOut($stream);
            if ($line === false || $line === '') {
                return null;
            }
            throw new ConnectionException('the daemon\'s answer line broke off');
        }
        return substr($line, 0, -1);
    }

    /** Records a complete line-protocol exchange; the daemon closes an idle one after $idleSeconds. */
    public function answeredLine(int $idleSeconds): void
    {
        $this->answered++;
        $this->idleUntilNs = hrtime(true) + max(0, $idleSeconds - 1) * 1_000_000_000;
    }

    /** Records a complete exchange; returns whether the connection can carry another one. */
    public function answered(Response $response, string $method): bool
    {
        $this->answered++;
        if (!$response->keepAlive() || Wire::framing($response, $method) === 'eof') {
            return false;
        }
        $timeout = $response->keepAliveTimeout();
        $this->idleUntilNs = $timeout === null ? null : hrtime(true) + max(0, $timeout - 1) * 1_000_000_000;
        return true;
    }

    public function close(): void
    {
        $stream = $this->stream;
        $this->stream = null;
        // A persistent stream is the worker's, shared by its Clients of the same address: another
        // one may have closed it already.
        if (is_resource($stream)) {
            self::quietly(static fn () => @fclose($stream));
        }
    }

    public function __destruct()
    {
        if (!$this->persistent) {
            $this->close();
        }
    }

    /** @return resource */
    private function stream()
    {
        if ($this->stream === null) {
            throw new ConnectionException('the connection is closed');
        }
        if (!is_resource($this->stream)) {
            // A persistent stream another Client of this worker closed: gone as a reset one is.
            $this->stream = null;
            throw new ConnectionException('the connection was closed by another client of this process');
        }
        return $this->stream;
    }

    /**
     * Runs a stream call under PHP's own error handling: an application's handler that throws
     * (many do, even for errors silenced with @) would turn a dead connection into an
     * ErrorException, which the client's retry and spool rules never see. PHP's handler keeps the
     * warning for error_get_last(), and @ keeps it quiet.
     *
     * @template T
     * @param callable(): T $io
     * @return T
     */
    private static function quietly(callable $io): mixed
    {
        set_error_handler(static fn (): bool => false);
        try {
            return $io();
        } finally {
            restore_error_handler();
        }
    }
}
