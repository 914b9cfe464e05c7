<?php

declare(strict_types=1);

namespace TransferSidecar;

use TransferSidecar\Exception\ConnectionException;
use TransferSidecar\Exception\InvalidArgumentException;
use TransferSidecar\Exception\JobNotFoundException;
use TransferSidecar\Exception\RequestException;
use TransferSidecar\Exception\SidecarException;
use TransferSidecar\Exception\SpoolException;
use TransferSidecar\Exception\UnavailableException;
use TransferSidecar\Http\Connection;
use TransferSidecar\Http\Response;
use TransferSidecar\Http\Wire;

/**
 * Hands file-transfer jobs to the local transfer-sidecar daemon and asks about them.
 *
 *     $sidecar = new Client(['socket' => '/run/transfer-sidecar/sidecar.sock', 'spool' => '/var/spool/transfer-sidecar']);
 *     $id = $sidecar->upload('hdfs', '/var/www/uploads/a.bin', '/2026/a.bin');
 *
 * One connection is kept open and reused for every call on this object (HTTP keep-alive). A
 * reused connection the daemon has closed in the meantime is detected (write error, or end of
 * stream before the first byte of the answer) and the request is sent once more on a new one:
 * job ids make that safe.
 */
final class Client
{
    private const OPTIONS = ['socket', 'host', 'port', 'handoff_socket', 'token', 'connect_timeout', 'read_timeout', 'spool', 'protocol', 'persistent'];
    private const JOB_OPTIONS = ['id', 'overwrite', 'sha256', 'digest', 'callback'];
    /** The daemon refuses longer request bodies (413 PAYLOAD_TOO_LARGE). */
    private const MAX_BODY_BYTES = 65536;
    /** The daemon closes a line-protocol connection idle this long (src/http/lines.js). */
    private const LINE_IDLE_SECONDS = 5;
    /**
     * handOffAll() writes at most this many job lines (and bytes of them) before it reads their
     * answers: the daemon reads ahead 64 lines or 1 MiB, and answers that wait are a few KiB.
     */
    private const BATCH_LINES = 32;
    private const BATCH_BYTES = 256 * 1024;

    private string $address;
    /** Where hand-offs go: the daemon's hand-off socket (handoff.listen) if given, else $address. */
    private string $handoffAddress;
    private string $transport;
    /** The transport of $handoffAddress, as observeLastHandoff() reports it. */
    private string $handoffTransport;
    private float $connectTimeout;
    private float $readTimeout;
    private ?Spool $spool;
    /** Host, User-Agent and Authorization lines, ready to send. */
    private array $baseHeaders;
    private ?Connection $connection = null;
    private string $protocol;
    /** Line protocol: the first line of a connection when the daemon has a token. */
    private string $tokenLine = '';
    private ?Connection $lineConnection = null;
    /** The line-protocol connection outlives the request, for the worker's next one. */
    private bool $persistent = false;
    private ?float $lastHandoffSeconds = null;
    private bool $lastHandoffAcked = true;

    /**
     * @param array{socket?: string, host?: string, port?: int, token?: ?string, connect_timeout?: float,
     *              read_timeout?: float, spool?: ?string, protocol?: 'lines'|'http', persistent?: bool,
     *              handoff_socket?: ?string} $options
     *   socket: unix socket path; or host + port (default 127.0.0.1:8765)
     *   handoff_socket: the unix socket of the daemon's hand-off thread (its config's handoff.listen),
     *     where job lines go when given (with protocol "lines"; null: none); status, wait and cancel
     *     still go to socket or host + port
     *   protocol: how upload()/download()/send() hand a job off: "lines" (default), one JSON line each
     *     way on a kept connection, or "http", POST /v1/jobs; the same answers, errors and
     *     durability, the line protocol skips the daemon's HTTP server (see the README)
     *   persistent: keep the line-protocol connection open after the request for the PHP worker's
     *     next one (as php-redis's pconnect): no connect and accept per request (false by default;
     *     with protocol "lines" only)
     *   token: sent as "Authorization: Bearer <token>" when the daemon has one
     *   connect_timeout (1.0 s), read_timeout (5.0 s: longest silence while waiting for an answer)
     *   spool: directory for the fallback when the daemon cannot take a job (see Spool)
     */
    public function __construct(#[\SensitiveParameter] array $options = [])
    {
        foreach (array_keys($options) as $key) {
            if (!in_array($key, self::OPTIONS, true)) {
                throw new InvalidArgumentException(sprintf('%s: unknown option (allowed: %s)', $key, implode(', ', self::OPTIONS)));
            }
        }
        $socket = $options['socket'] ?? null;
        if ($socket !== null) {
            if (!is_string($socket) || $socket === '' || str_contains($socket, "\0")) {
                throw new InvalidArgumentException('socket: must be the path of the daemon\'s unix socket');
            }
            if (array_key_exists('host', $options) || array_key_exists('port', $options)) {
                throw new InvalidArgumentException('socket: give either socket or host/port, not both');
            }
            $this->address = 'unix://' . $socket;
            $this->transport = 'unix';
        } else {
            $host = $options['host'] ?? '127.0.0.1';
            if (!is_string($host) || preg_match('/^(?:[A-Za-z0-9.-]{1,253}|\[?[0-9A-Fa-f:.]{2,45}\]?)$/D', $host) !== 1) {
                throw new InvalidArgumentException('host: must be a host name or IP address, e.g. "127.0.0.1"');
            }
            $port = $options['port'] ?? 8765;
            if (!is_int($port) || $port < 1 || $port > 65535) {
                throw new InvalidArgumentException('port: must be an integer from 1 to 65535');
            }
            if (str_contains($host, ':') && $host[0] !== '[') {
                $host = '[' . $host . ']';
            }
            $this->address = sprintf('tcp://%s:%d', $host, $port);
            $this->transport = 'tcp';
        }
        $token = $options['token'] ?? null;
        if ($token !== null && (!is_string($token) || preg_match('/^[\x21-\x7e]+$/D', $token) !== 1)) {
            throw new InvalidArgumentException('token: must be null or a non-empty string of visible ASCII characters without spaces');
        }
        $this->connectTimeout = self::seconds($options, 'connect_timeout', 1.0);
        $this->readTimeout = self::seconds($options, 'read_timeout', 5.0);
        $spool = $options['spool'] ?? null;
        if ($spool !== null && (!is_string($spool) || $spool === '' || !is_dir($spool))) {
            throw new InvalidArgumentException(sprintf('spool: must be null or an existing directory, got %s', json_encode($spool)));
        }
        // Found now, not at the first outage: a spool this PHP user cannot write to.
        if ($spool !== null && !is_writable($spool)) {
            throw new InvalidArgumentException(sprintf('spool: %s is not writable by this PHP user', json_encode($spool)));
        }
        $this->spool = $spool === null ? null : new Spool($spool);
        $this->baseHeaders = ['Host' => 'localhost', 'User-Agent' => 'transfer-sidecar-php/0.1'];
        if ($token !== null) {
            $this->baseHeaders['Authorization'] = 'Bearer ' . $token;
            $this->tokenLine = json_encode(['token' => $token], JSON_THROW_ON_ERROR) . "\n";
        }
        $protocol = $options['protocol'] ?? 'lines';
        if ($protocol !== 'lines' && $protocol !== 'http') {
            throw new InvalidArgumentException('protocol: must be "lines" or "http"');
        }
        $this->protocol = $protocol;
        $this->handoffAddress = $this->address;
        $this->handoffTransport = $this->transport;
        if (($options['handoff_socket'] ?? null) !== null) {
            $handoff = $options['handoff_socket'];
            if (!is_string($handoff) || $handoff === '' || str_contains($handoff, "\0")) {
                throw new InvalidArgumentException('handoff_socket: must be the path of the daemon\'s hand-off socket (handoff.listen)');
            }
            if ($protocol !== 'lines') {
                throw new InvalidArgumentException('handoff_socket: only with protocol "lines"');
            }
            $this->handoffAddress = 'unix://' . $handoff;
            $this->handoffTransport = 'unix';
        }
        $persistent = $options['persistent'] ?? false;
        if (!is_bool($persistent)) {
            throw new InvalidArgumentException('persistent: must be true or false');
        }
        if ($persistent && $protocol !== 'lines') {
            throw new InvalidArgumentException('persistent: only with protocol "lines"');
        }
        $this->persistent = $persistent;
    }

    /**
     * Hands over an upload (local file → target) and returns its id once the daemon has it on disk
     * (its 202), or, when the daemon cannot be reached or answers 429/5xx and a spool is
     * configured, once the job is in the spool.
     *
     * @param array{id?: string, overwrite?: bool, sha256?: string, digest?: 'sha256'|'none', callback?: string} $options
     * @throws RequestException the daemon refused the job (4xx): fix the request, it was not spooled
     * @throws ConnectionException|UnavailableException no spool configured and the daemon could not take it
     * @throws SpoolException the daemon could not take it and the spool could not be written either
     */
    public function upload(string $target, string $local, string $remote, array $options = []): string
    {
        $this->lastHandoffSeconds = null; // also when the job is refused before any hand-off
        return $this->handOff($this->job('upload', $target, $local, $remote, $options), true);
    }

    /**
     * Hands over a download (target → local file); like upload().
     *
     * @param array{id?: string, overwrite?: bool, sha256?: string, digest?: 'sha256'|'none', callback?: string} $options
     */
    public function download(string $target, string $local, string $remote, array $options = []): string
    {
        $this->lastHandoffSeconds = null; // as in upload()
        return $this->handOff($this->job('download', $target, $local, $remote, $options), true);
    }

    /**
     * Fire-and-forget: opens a new connection, writes the request with "Connection: close" and
     * closes without reading the answer. A few µs faster than upload(), and unsafe: nothing tells
     * you whether the job was accepted. A job the daemon refuses (invalid, 429 QUEUE_FULL, 503) is
     * silently lost, and in a burst the daemon's accept queue overflows: a bare write-and-close
     * hand-off lost 1318–1471 of 2000 jobs over a unix socket in our measurements (EAGAIN on
     * connect; see the README), and stalled for 1 s per dropped SYN over TCP. Here connect and
     * write failures still go to the spool (or throw), but anything after the write goes unseen.
     * Use upload()/download() (they read the 202, which the daemon sends after its journal's
     * fdatasync: ~0.7–1 ms on this project's test machine) unless losing the job is
     * acceptable, e.g. for a best-effort cache warm-up.
     *
     * @param string $direction "upload" or "download"
     * @param array{id?: string, overwrite?: bool, sha256?: string, digest?: 'sha256'|'none', callback?: string} $options
     */
    public function send(string $direction, string $target, string $local, string $remote, array $options = []): string
    {
        $this->lastHandoffSeconds = null; // as in upload()
        if ($direction !== 'upload' && $direction !== 'download') {
            throw new InvalidArgumentException(sprintf('direction: must be "upload" or "download", got %s', json_encode($direction)));
        }
        return $this->handOff($this->job($direction, $target, $local, $remote, $options), false);
    }

    /**
     * Hands over many jobs in one call. Over the line protocol their lines go out together on one
     * connection (up to 32 at a time) and the daemon checks and records them in order, then puts
     * them on disk together: with `journal.sync` "fsync", one synced write for such a batch instead
     * of one per job. Each job is otherwise handled as upload()/download() would handle it alone,
     * spool included; what that call would have thrown for a job is returned in its place (under
     * the job's key, in its order), so that one refused job does not hide the others' ids. A
     * daemon that does not answer costs one read_timeout per window, not one per job. (With
     * protocol "http", one request per job.)
     *
     *     $results = $sidecar->handOffAll([
     *         ['direction' => 'upload', 'target' => 'hdfs', 'local' => '/var/www/uploads/a.jpg', 'remote' => '/2026/a.jpg'],
     *         ['direction' => 'upload', 'target' => 'hdfs', 'local' => '/var/www/uploads/b.jpg', 'remote' => '/2026/b.jpg', 'overwrite' => true],
     *     ]);
     *     foreach ($results as $i => $result) {
     *         if ($result instanceof SidecarException) { ... } // refused, or neither taken nor spooled
     *     }
     *
     * @param array<array-key, array{direction: 'upload'|'download', target: string, local: string, remote: string, id?: string, overwrite?: bool, sha256?: string, digest?: 'sha256'|'none', callback?: string}> $jobs
     * @return array<array-key, string|SidecarException> per job, under its key and in its order: its id, or the exception
     * @throws InvalidArgumentException a job is not well formed (nothing was handed over)
     */
    public function handOffAll(array $jobs): array
    {
        $this->lastHandoffSeconds = null; // a batch is not one hand-off
        $lines = [];
        foreach ($jobs as $key => $spec) {
            if (!is_array($spec)) {
                throw new InvalidArgumentException(sprintf('jobs[%s]: must be an array', $key));
            }
            foreach (['direction', 'target', 'local', 'remote'] as $field) {
                if (!is_string($spec[$field] ?? null)) {
                    throw new InvalidArgumentException(sprintf('jobs[%s].%s: must be a string', $key, $field));
                }
            }
            if ($spec['direction'] !== 'upload' && $spec['direction'] !== 'download') {
                throw new InvalidArgumentException(sprintf('jobs[%s].direction: must be "upload" or "download", got %s', $key, json_encode($spec['direction'])));
            }
            $options = array_diff_key($spec, array_flip(['direction', 'target', 'local', 'remote']));
            $job = $this->job($spec['direction'], $spec['target'], $spec['local'], $spec['remote'], $options);
            $lines[$key] = [$job, self::encode($job)];
        }
        $results = [];
        $window = []; // the lines to write together, by the jobs' keys
        $windowBytes = 0;
        $flush = function () use (&$results, &$window, &$windowBytes): void {
            $results += $this->handOffLines($window);
            $window = [];
            $windowBytes = 0;
        };
        foreach ($lines as $key => [$job, $body]) {
            // Alone: with protocol "http", or refused here as upload() refuses it (over 64 KiB).
            $alone = $this->protocol !== 'lines' || strlen($body) > self::MAX_BODY_BYTES;
            if ($window !== [] && ($alone || count($window) === self::BATCH_LINES || $windowBytes + strlen($body) > self::BATCH_BYTES)) {
                $flush(); // first: the results keep the jobs' order
            }
            if ($alone) {
                $results[$key] = $this->handOffOne($job);
                continue;
            }
            $window[$key] = [$job, $body];
            $windowBytes += strlen($body) + 1;
        }
        if ($window !== []) {
            $flush();
        }
        return $results;
    }

    /**
     * @param array<string, mixed> $job
     * @return string|SidecarException
     */
    private function handOffOne(array $job): string|SidecarException
    {
        try {
            return $this->handOff($job, true);
        } catch (SidecarException $e) {
            return $e;
        } finally {
            $this->lastHandoffSeconds = null;
        }
    }

    /**
     * One window of handOffAll(): its lines in one write, then their answers. When no answer comes
     * (the daemon cannot be reached, or does not answer within read_timeout), every job of the
     * window fares as upload() would have: spooled, or the exception. When the connection breaks
     * after some answers, the jobs left are sent again together, under their ids.
     *
     * @param array<array-key, array{0: array<string, mixed>, 1: string}> $window
     * @return array<array-key, string|SidecarException> by the window's keys, in its order
     */
    private function handOffLines(array $window): array
    {
        try {
            $answers = $this->lineExchanges(array_map(static fn (array $line): array => [$line[0]['id'], $line[1]], array_values($window)))
                ?: throw new ConnectionException('the daemon closed the connection without answering the jobs');
        } catch (ConnectionException | UnavailableException $e) {
            return array_map(fn (array $line): string|SidecarException => $this->notTaken($line[0]['id'], $line[1], $e), $window);
        }
        $refused = $answers !== [] && end($answers)['status'] === 401 ? end($answers) : null; // the lines after it are not answered
        $results = [];
        $n = 0;
        foreach ($window as $key => [$job, $body]) {
            $answer = $answers[$n] ?? $refused;
            if ($answer === null) {
                return $results + $this->handOffLines(array_slice($window, $n, null, true));
            }
            $n++;
            if (self::tookJob($answer['status'], $answer, $job['id'])) {
                $results[$key] = $job['id'];
                continue;
            }
            $reason = $this->lineFailure($answer, $job['id']);
            $results[$key] = $reason instanceof RequestException ? $reason : $this->notTaken($job['id'], $body, $reason);
        }
        return $results;
    }

    /**
     * A job the daemon could not take: written to the spool (its id), or why not (the daemon's
     * reason without a spool; a SpoolException when the spool could not be written either).
     */
    private function notTaken(string $id, string $body, SidecarException $reason): string|SidecarException
    {
        if ($this->spool === null) {
            return $reason;
        }
        try {
            $this->spool->write($id, $body);
        } catch (SpoolException $e) {
            return new SpoolException(sprintf('the daemon could not take job %s (%s) and %s', $id, $reason->getMessage(), $e->getMessage()), 0, $reason);
        }
        return $id;
    }

    /**
     * The job as the daemon shows it: state (queued, running, succeeded, failed, cancelled), bytes,
     * size, rate, sha256, error, timestamps.
     *
     * @return array<string, mixed>
     * @throws JobNotFoundException
     */
    public function status(string $id): array
    {
        return $this->jobCall('GET', '/v1/jobs/' . self::checkId($id), $id, $this->readTimeout);
    }

    /**
     * Long-polls until the job has ended or $timeout seconds (≤ 300) have passed; returns the job.
     *
     * @return array<string, mixed>
     * @throws JobNotFoundException
     */
    public function wait(string $id, float $timeout): array
    {
        if (!is_finite($timeout) || $timeout < 0 || $timeout > 300) {
            throw new InvalidArgumentException('timeout: must be from 0 to 300 seconds');
        }
        $wait = rtrim(rtrim(sprintf('%.3F', $timeout), '0'), '.');
        return $this->jobCall('GET', '/v1/jobs/' . self::checkId($id) . '?wait=' . $wait, $id, $timeout + $this->readTimeout);
    }

    /**
     * Cancels a queued or running job; returns it, now "cancelled".
     *
     * @return array<string, mixed>
     * @throws JobNotFoundException
     * @throws RequestException 409 JOB_FINISHED when it has already ended
     */
    public function cancel(string $id): array
    {
        return $this->jobCall('DELETE', '/v1/jobs/' . self::checkId($id), $id, $this->readTimeout);
    }

    /**
     * Reports a measurement to the daemon's /metrics (POST /v1/observations). Never throws: a
     * failed report must not break the caller.
     *
     * @param array<string, mixed> $observation e.g. ['type' => 'transfer', 'via' => 'php_curl', ...]
     */
    public function observe(array $observation): void
    {
        try {
            $this->exchange('POST', '/v1/observations', self::encode($observation), $this->readTimeout);
        } catch (\Throwable) {
            // best effort by design
        }
    }

    /**
     * Reports the last hand-off's duration (type "handoff"). Hand-offs are measured on every call
     * (lastHandoffSeconds()) but reported only when you call this, e.g. for one request in a hundred.
     */
    public function observeLastHandoff(): void
    {
        if ($this->lastHandoffSeconds !== null) {
            $this->observe([
                'type' => 'handoff',
                'transport' => $this->handoffTransport,
                'acked' => $this->lastHandoffAcked,
                'seconds' => $this->lastHandoffSeconds,
            ]);
        }
    }

    /**
     * Seconds the last upload()/download()/send() took to hand its job off (to the daemon, or to
     * the spool); null before any, and after a call that threw (it handed nothing off).
     */
    public function lastHandoffSeconds(): ?float
    {
        return $this->lastHandoffSeconds;
    }

    /**
     * The daemon's path that streams $remote from $target: /v1/stream/{target}/{remote}, every
     * segment percent-encoded.
     */
    public static function streamUrl(string $target, string $remote): string
    {
        return '/v1/stream/' . self::streamPath($target, $remote);
    }

    /**
     * The header that makes nginx serve the file itself from an `internal` location proxying to
     * the daemon, freeing the PHP worker at once:
     *
     *     header(Client::accelRedirectHeader('files', '/2026/a b.bin'));
     *     // X-Accel-Redirect: /sidecar-stream/files/2026/a%20b.bin
     */
    public static function accelRedirectHeader(string $target, string $remote, string $locationPrefix = '/sidecar-stream'): string
    {
        if ($locationPrefix === '' || $locationPrefix[0] !== '/' || preg_match('/[\x00-\x20\x7f?#]/', $locationPrefix) === 1) {
            throw new InvalidArgumentException('locationPrefix: must be an absolute path without spaces, control characters, ? or #');
        }
        return 'X-Accel-Redirect: ' . rtrim($locationPrefix, '/') . '/' . self::streamPath($target, $remote);
    }

    /**
     * Streams a file from a target to the PHP output with constant memory: forwards the status
     * (200, 206, or the daemon's 4xx/5xx with its JSON error) and the Content-Type,
     * Content-Length, Content-Range and Accept-Ranges headers (not under the CLI or once headers
     * are sent), then copies the body to php://output in 64 KiB pieces. Returns the bytes copied.
     *
     * @param string|null $range an HTTP Range value, e.g. $_SERVER['HTTP_RANGE'] ("bytes=0-1023");
     *                           one that is not a bytes range (another unit, over 200 characters) is
     *                           ignored, as HTTP requires of a server (RFC 9110 14.2): the whole file
     * @throws ConnectionException the daemon could not be reached, or the body broke off midway
     */
    public function passthru(string $target, string $remote, ?string $range = null): int
    {
        $headers = [];
        if ($range !== null && preg_match('/^bytes=[0-9, -]{1,200}$/D', $range) === 1) {
            $headers['Range'] = $range;
        }
        [$connection, $response] = $this->roundTrip('GET', self::streamUrl($target, $remote), null, $this->readTimeout, $headers);
        if (PHP_SAPI !== 'cli' && !headers_sent()) {
            http_response_code($response->status);
            foreach (['Content-Type', 'Content-Length', 'Content-Range', 'Accept-Ranges'] as $name) {
                $value = $response->header($name);
                if ($value !== null) {
                    header($name . ': ' . $value);
                }
            }
        }
        $output = fopen('php://output', 'wb');
        if ($output === false) {
            $this->drop();
            throw new ConnectionException('cannot open php://output');
        }
        $complete = true;
        try {
            $copied = $connection->copyBody($response, 'GET', static function (string $chunk) use ($output, &$complete): bool {
                if (@fwrite($output, $chunk) !== strlen($chunk)) {
                    return $complete = false; // the browser went away
                }
                return true;
            });
        } catch (\Throwable $e) {
            $this->drop();
            throw $e;
        } finally {
            fclose($output);
        }
        if (!$complete || !$connection->answered($response, 'GET')) {
            $this->drop();
        }
        return $copied;
    }

    /** Closes the kept-alive connections (they are also closed when the object goes away). */
    public function close(): void
    {
        $this->dropAll();
    }

    /**
     * @param array<string, mixed> $options
     * @return array<string, mixed>
     */
    private function job(string $direction, string $target, string $local, string $remote, array $options): array
    {
        foreach (array_keys($options) as $key) {
            if (!in_array($key, self::JOB_OPTIONS, true)) {
                throw new InvalidArgumentException(sprintf('%s: unknown job option (allowed: %s)', $key, implode(', ', self::JOB_OPTIONS)));
            }
        }
        // null is "not given", as in the daemon's API: ['sha256' => $maybeHash] is fine.
        $options = array_filter($options, static fn ($value): bool => $value !== null);
        // Your own id makes a retry after a ConnectionException or UnavailableException safe: the
        // daemon answers a resubmission of the same id and body with the job it may already have.
        if (array_key_exists('id', $options) && (!is_string($options['id']) || !JobId::isValid($options['id']))) {
            throw new InvalidArgumentException(sprintf('id: must match %s', JobId::PATTERN));
        }
        $job = ['id' => $options['id'] ?? JobId::generate(), 'direction' => $direction, 'target' => $target, 'local' => $local, 'remote' => $remote];
        if (array_key_exists('overwrite', $options)) {
            if (!is_bool($options['overwrite'])) {
                throw new InvalidArgumentException('overwrite: must be true or false');
            }
            $job['overwrite'] = $options['overwrite'];
        }
        if (array_key_exists('sha256', $options)) {
            if (!is_string($options['sha256']) || preg_match('/^[0-9a-fA-F]{64}$/D', $options['sha256']) !== 1) {
                throw new InvalidArgumentException('sha256: must be 64 hexadecimal characters');
            }
            $job['sha256'] = strtolower($options['sha256']);
        }
        if (array_key_exists('digest', $options)) {
            if ($options['digest'] !== 'sha256' && $options['digest'] !== 'none') {
                throw new InvalidArgumentException('digest: must be "sha256" or "none"');
            }
            $job['digest'] = $options['digest'];
        }
        if (array_key_exists('callback', $options)) {
            if (!is_string($options['callback']) || preg_match('#^https?://[^\s]+$#iD', $options['callback']) !== 1) {
                throw new InvalidArgumentException('callback: must be an http(s) URL');
            }
            $job['callback'] = $options['callback'];
        }
        return $job;
    }

    /** @param array<string, mixed> $job */
    private function handOff(array $job, bool $acked): string
    {
        $started = hrtime(true);
        // Set again by handedOff() only: a call that throws leaves null, which observeLastHandoff() skips.
        $this->lastHandoffSeconds = null;
        $this->lastHandoffAcked = $acked;
        $id = $job['id'];
        $body = self::encode($job);
        if (strlen($body) > self::MAX_BODY_BYTES) {
            // Refused here: sent, the daemon's 413 can arrive while PHP is still writing, and the
            // broken pipe would look like a daemon that is down (and send the job to the spool).
            throw new RequestException(413, 'PAYLOAD_TOO_LARGE', sprintf('the job is %d bytes of JSON, over the daemon\'s %d', strlen($body), self::MAX_BODY_BYTES), $id);
        }
        try {
            if (!$acked) {
                $this->fireAndForget($body);
                return $this->handedOff($id, $started);
            }
            if ($this->protocol === 'lines') {
                $answer = $this->lineExchange($body, $id);
                if (self::tookJob($answer['status'], $answer, $id)) {
                    return $this->handedOff($id, $started);
                }
                $reason = $this->lineFailure($answer, $id);
            } else {
                $response = $this->exchange('POST', '/v1/jobs', $body, $this->readTimeout);
                if (self::tookJob($response->status, $response->json(), $id)) {
                    return $this->handedOff($id, $started);
                }
                $reason = $this->failure($response, $id);
            }
            if ($reason instanceof RequestException) {
                throw $reason; // invalid as sent: spooling would not help
            }
        } catch (ConnectionException | UnavailableException $e) {
            $reason = $e;
        }
        $spooled = $this->notTaken($id, $body, $reason);
        if ($spooled instanceof SidecarException) {
            throw $spooled;
        }
        return $this->handedOff($id, $started);
    }

    /**
     * Whether an answer is the daemon's {"id","state"} of this job (202, or 200 for a resubmission):
     * any other 200 (a proxy's page, another service on the port) is not a hand-off, and goes to the spool.
     *
     * @param array<string, mixed>|null $answer
     */
    private static function tookJob(int $status, ?array $answer, string $id): bool
    {
        return ($status === 202 || $status === 200) && ($answer['id'] ?? null) === $id;
    }

    /** Records the hand-off's duration (to the daemon's 202, or the spool write); returns the id. */
    private function handedOff(string $id, int $started): string
    {
        $this->lastHandoffSeconds = (hrtime(true) - $started) / 1e9;
        return $id;
    }

    private function fireAndForget(string $body): void
    {
        $connection = Connection::open($this->handoffAddress, $this->connectTimeout);
        try {
            $connection->write($this->protocol === 'lines'
                ? $this->tokenLine . $body . "\n"
                : Wire::request('POST', '/v1/jobs', $this->headers(true, ['Connection' => 'close']), $body));
        } finally {
            $connection->close();
        }
    }

    /** @return array<string, mixed> */
    private function jobCall(string $method, string $path, string $id, float $readTimeout): array
    {
        $response = $this->exchange($method, $path, null, $readTimeout);
        if ($response->status !== 200) {
            throw $this->failure($response, $id);
        }
        $job = $response->json();
        if ($job === null) {
            throw new UnavailableException(sprintf('the daemon answered %s %s with a body that is not a JSON object', $method, $path), $response->status);
        }
        return $job;
    }

    /** The exception for an answer that is not the expected success. */
    private function failure(Response $response, ?string $id): SidecarException
    {
        $error = $response->error();
        $retryAfter = $response->header('retry-after');
        return self::failureOf($response->status, $error['code'], $error['message'], $retryAfter !== null && ctype_digit($retryAfter) ? (int) $retryAfter : null, $id);
    }

    /** @param array{status: int, error?: array{code?: mixed, message?: mixed}, retryAfter?: mixed} $answer */
    private function lineFailure(array $answer, string $id): SidecarException
    {
        $code = $answer['error']['code'] ?? null;
        $message = $answer['error']['message'] ?? null;
        $retryAfter = $answer['retryAfter'] ?? null;
        return self::failureOf(
            $answer['status'],
            is_string($code) ? $code : 'LINE_' . $answer['status'],
            is_string($message) ? $message : '',
            is_int($retryAfter) && $retryAfter >= 0 ? $retryAfter : null,
            $id
        );
    }

    private static function failureOf(int $status, string $code, string $message, ?int $retryAfter, ?string $id): SidecarException
    {
        if ($status === 404 && $id !== null && $code === 'JOB_NOT_FOUND') {
            return new JobNotFoundException(404, $code, $message, $id);
        }
        // A 4xx with the daemon's {"error":{"code":…}} refused the request as sent; a 4xx without
        // it came from something else on the way (HTTP_<status>), like an unexpected 201 or 302.
        if ($status >= 400 && $status < 500 && $status !== 429 && !str_starts_with($code, 'HTTP_') && !str_starts_with($code, 'LINE_')) {
            return new RequestException($status, $code, $message, $id);
        }
        return new UnavailableException(sprintf('the daemon answered HTTP %d %s: %s', $status, $code, $message), $status, $code, $retryAfter);
    }

    /**
     * One job line and its answer line on the kept line-protocol connection.
     *
     * @return array{status: int, id?: mixed, state?: mixed, error?: mixed, retryAfter?: mixed}
     */
    private function lineExchange(string $body, string $id): array
    {
        return $this->lineExchanges([[$id, $body]])[0]
            ?? throw new ConnectionException('the daemon closed the connection without answering the job');
    }

    /**
     * Job lines, written at once, and their answer lines, on the kept line-protocol connection
     * (with the token line first on a new one, and on every use of a persistent one: it may have
     * been opened by another client of the worker). A reused connection found dead before any
     * answer byte is replaced once, as is a reused one whose first answer names another job (the
     * jobs' own ids make the resend safe). Returns the answers in the lines' order: fewer than the
     * lines when the daemon refused the token (401, then it closes) or the connection broke or went
     * out of step after the first answer (it is dropped; the caller decides about the rest).
     *
     * @param non-empty-list<array{0: string, 1: string}> $lines [id, body] each
     * @return list<array{status: int, id?: mixed, state?: mixed, error?: mixed, retryAfter?: mixed}>
     * @throws ConnectionException|UnavailableException no answer could be read
     */
    private function lineExchanges(array $lines): array
    {
        $payload = implode('', array_map(static fn (array $line): string => $line[1] . "\n", $lines));
        for ($attempt = 1; ; $attempt++) {
            if ($this->lineConnection !== null && $this->lineConnection->isIdleExpired()) {
                $this->dropLines();
            }
            $connection = $this->lineConnection ??= Connection::open($this->handoffAddress, $this->connectTimeout, $this->persistent);
            $retryable = $attempt === 1 && $connection->isReused();
            $tokenLine = $connection->isReused() && !$this->persistent ? '' : $this->tokenLine;
            if (!self::sent($connection, $tokenLine . $payload, $retryable, fn () => $this->dropLines())) {
                continue;
            }
            $answers = [];
            try {
                $connection->setReadTimeout($this->readTimeout);
                while (count($answers) < count($lines)) {
                    $answer = self::answerLine($connection->readLine());
                    if ($tokenLine !== '' && $answers === [] && $answer !== null && $answer['status'] === 200 && !isset($answer['id'])) {
                        $tokenLine = ''; // the token was taken: the jobs' answers follow
                        continue;
                    }
                    if ($answer === null || ($answer['id'] ?? null) !== $lines[count($answers)][0] && ($retryable || $answers !== [])) {
                        // Closed, or out of step: an answer that does not name its job (the daemon
                        // names it in every answer to a line that has an id, refusals included) may
                        // be one an interrupted request left unread on a reused connection. Not
                        // taken as ours. (On a new connection the first answer can be no other's:
                        // there it is taken, or is a failure.)
                        break;
                    }
                    $answers[] = $answer;
                    if ($answer['status'] === 401) {
                        break; // the daemon answers nothing more, and closes
                    }
                }
            } catch (\Throwable $e) {
                $this->dropLines();
                if ($answers === []) {
                    throw $e;
                }
                return $answers;
            }
            if (count($answers) === count($lines) && end($answers)['status'] !== 401) {
                $connection->answeredLine(self::LINE_IDLE_SECONDS);
                return $answers;
            }
            $this->dropLines();
            if ($answers === [] && $retryable) {
                continue;
            }
            return $answers;
        }
    }

    /**
     * @return array{status: int}|null null: no line
     * @throws ConnectionException an answer cut short
     * @throws UnavailableException a line that is not the line protocol's answer (not the daemon?)
     */
    private static function answerLine(?string $line): ?array
    {
        if ($line === null) {
            return null;
        }
        $answer = json_decode($line, true);
        if (!is_array($answer) || !is_int($answer['status'] ?? null)) {
            $what = sprintf('the daemon answered a line that is not a line-protocol answer: %s', json_encode(substr($line, 0, 100)));
            // An answer cut short is the connection's; anything else is something other than the
            // daemon answering (an HTTP server on the port, say): unavailable, as over HTTP.
            if (str_starts_with($line, '{')) {
                throw new ConnectionException($what);
            }
            throw new UnavailableException($what, 0, 'LINE_INVALID');
        }
        return $answer;
    }

    private function dropLines(): void
    {
        $this->lineConnection?->close();
        $this->lineConnection = null;
    }

    /** One request and its complete answer on the kept-alive connection. */
    private function exchange(string $method, string $path, ?string $body, float $readTimeout): Response
    {
        [$connection, $response] = $this->roundTrip($method, $path, $body, $readTimeout);
        try {
            $response = $response->withBody($connection->readBody($response, $method));
        } catch (\Throwable $e) {
            $this->drop();
            throw $e;
        }
        if (!$connection->answered($response, $method)) {
            $this->drop();
        }
        return $response;
    }

    /**
     * Sends a request and reads the answer's head; the body is left on the connection.
     * A reused connection found dead before any answer byte is replaced once.
     *
     * @param array<string, string> $extraHeaders
     * @return array{0: Connection, 1: Response}
     */
    private function roundTrip(string $method, string $path, ?string $body, float $readTimeout, array $extraHeaders = []): array
    {
        $request = Wire::request($method, $path, $this->headers($body !== null, $extraHeaders), $body);
        for ($attempt = 1; ; $attempt++) {
            $connection = $this->connection();
            $retryable = $attempt === 1 && $connection->isReused();
            if (!self::sent($connection, $request, $retryable, fn () => $this->drop())) {
                continue;
            }
            try {
                $connection->setReadTimeout($readTimeout);
                $response = $connection->readHead();
            } catch (\Throwable $e) {
                $this->drop();
                throw $e;
            }
            if ($response === null) {
                $this->drop();
                if ($retryable) {
                    continue;
                }
                throw new ConnectionException(sprintf('the daemon closed the connection without answering %s %s', $method, $path));
            }
            return [$connection, $response];
        }
    }

    /**
     * Writes a request on a kept connection. False: the write failed on a reused connection (the
     * daemon closed it meanwhile), which $drop has dropped; the caller sends once more on a new one.
     *
     * @param callable(): void $drop
     * @throws ConnectionException the write failed on a fresh connection (dropped too)
     */
    private static function sent(Connection $connection, #[\SensitiveParameter] string $request, bool $retryable, callable $drop): bool
    {
        try {
            $connection->write($request);
            return true;
        } catch (ConnectionException $e) {
            $drop();
            if ($retryable) {
                return false;
            }
            throw $e;
        }
    }

    private function connection(): Connection
    {
        if ($this->connection !== null && $this->connection->isIdleExpired()) {
            $this->drop();
        }
        return $this->connection ??= Connection::open($this->address, $this->connectTimeout);
    }

    private function drop(): void
    {
        $this->connection?->close();
        $this->connection = null;
    }

    /** Both kept connections. */
    private function dropAll(): void
    {
        $this->drop();
        $this->dropLines();
    }

    /**
     * @param array<string, string> $extra
     * @return array<string, string>
     */
    private function headers(bool $json, array $extra = []): array
    {
        $headers = $this->baseHeaders;
        if ($json) {
            $headers['Content-Type'] = 'application/json';
        }
        return $headers + $extra + ['Connection' => 'keep-alive'];
    }

    /** @param array<string, mixed> $value */
    private static function encode(array $value): string
    {
        try {
            return json_encode($value, JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE | JSON_THROW_ON_ERROR);
        } catch (\JsonException $e) {
            throw new InvalidArgumentException('the request cannot be encoded as JSON (paths must be UTF-8): ' . $e->getMessage(), 0, $e);
        }
    }

    private static function checkId(string $id): string
    {
        if (!JobId::isValid($id)) {
            throw new InvalidArgumentException(sprintf('id: %s does not match %s', json_encode(substr($id, 0, 100)), JobId::PATTERN));
        }
        return $id;
    }

    private static function streamPath(string $target, string $remote): string
    {
        if ($target === '') {
            throw new InvalidArgumentException('target: must not be empty');
        }
        // As the daemon normalises `remote`: empty and "." segments dropped, ".." refused (an
        // X-Accel-Redirect goes through nginx, which would resolve it, before the daemon sees it).
        $segments = array_values(array_filter(explode('/', $remote), static fn (string $s): bool => $s !== '' && $s !== '.'));
        if (in_array('..', $segments, true)) {
            throw new InvalidArgumentException('remote: must not contain ".." segments');
        }
        if ($segments === []) {
            throw new InvalidArgumentException('remote: must name a file, e.g. "/2026/a.bin"');
        }
        return rawurlencode($target) . '/' . implode('/', array_map('rawurlencode', $segments));
    }

    /** @param array<string, mixed> $options */
    private static function seconds(array $options, string $key, float $default): float
    {
        $value = $options[$key] ?? $default;
        if (!(is_int($value) || is_float($value)) || !is_finite((float) $value) || $value <= 0 || $value > 3600) {
            throw new InvalidArgumentException(sprintf('%s: must be a number of seconds above 0 (at most 3600)', $key));
        }
        return (float) $value;
    }
}
