<?php

declare(strict_types=1);

namespace TransferSidecar\Tests\Support;

/**
 * Runs tests/Fixtures/stub-server.php as a child process with a script of answers, and gives back
 * what it received.
 */
final class StubServer
{
    public readonly string $socket;
    private string $dir;
    private string $log;
    /** @var resource */
    private $process;
    /** @var array<int, resource> */
    private array $pipes = [];

    /** In a reply, stands for the generated id (22 characters) of the job in the request's body. */
    public const REQUEST_ID = '@@@@@@@@@@@@@@@@@@@@@@';

    /** @param list<list<array<string, mixed>>> $connections */
    public function __construct(array $connections)
    {
        $this->dir = sys_get_temp_dir() . '/sidecar-stub-' . bin2hex(random_bytes(6));
        mkdir($this->dir, 0700);
        $this->socket = $this->dir . '/stub.sock';
        $this->log = $this->dir . '/requests.jsonl';
        // Answers may be binary: they travel base64-encoded.
        $encoded = array_map(static fn (array $steps): array => array_map(
            static fn (array $step): array => isset($step['reply']) ? ['reply' => base64_encode($step['reply'])] + $step : $step,
            $steps
        ), $connections);
        file_put_contents($this->dir . '/script.json', json_encode($encoded, JSON_THROW_ON_ERROR));
        $process = proc_open(
            [PHP_BINARY, __DIR__ . '/../Fixtures/stub-server.php', $this->socket, $this->dir . '/script.json', $this->log],
            [0 => ['pipe', 'r'], 1 => ['pipe', 'w'], 2 => ['pipe', 'w']],
            $this->pipes
        );
        if ($process === false) {
            throw new \RuntimeException('cannot start the stub server');
        }
        $this->process = $process;
        $ready = fgets($this->pipes[1]);
        if ($ready !== "READY\n") {
            throw new \RuntimeException('stub server did not start: ' . stream_get_contents($this->pipes[2]));
        }
    }

    public static function answer(int $status, string $reason, string $body = '', array $headers = []): string
    {
        $head = sprintf("HTTP/1.1 %d %s\r\n", $status, $reason);
        $headers += ['Content-Type' => 'application/json; charset=utf-8', 'Content-Length' => (string) strlen($body)];
        foreach ($headers as $name => $value) {
            $head .= $name . ': ' . $value . "\r\n";
        }
        return $head . "\r\n" . $body;
    }

    public static function error(int $status, string $reason, string $code, string $message, array $headers = []): string
    {
        return self::answer($status, $reason, json_encode(['error' => ['code' => $code, 'message' => $message]]), $headers);
    }

    /**
     * Waits for the server to finish its script; returns the requests it read.
     *
     * @return list<array{conn: int, head: string, body: string}>
     */
    public function finish(): array
    {
        $deadline = microtime(true) + 10;
        while (proc_get_status($this->process)['running'] && microtime(true) < $deadline) {
            usleep(10000);
        }
        $status = proc_get_status($this->process);
        if ($status['running']) {
            proc_terminate($this->process, 9);
        }
        $stderr = stream_get_contents($this->pipes[2]);
        foreach ($this->pipes as $pipe) {
            fclose($pipe);
        }
        proc_close($this->process);
        $requests = is_file($this->log)
            ? array_map(static fn (string $l): array => json_decode($l, true), file($this->log, FILE_IGNORE_NEW_LINES))
            : [];
        if ($status['running'] || ($status['exitcode'] ?? 0) > 0) {
            throw new \RuntimeException(sprintf("stub server %s: %s\nrequests: %s",
                $status['running'] ? 'did not finish its script' : 'failed', $stderr, json_encode($requests)));
        }
        return $requests;
    }

    public function __destruct()
    {
        if (is_resource($this->process) && proc_get_status($this->process)['running']) {
            proc_terminate($this->process, 9);
        }
        foreach (glob($this->dir . '/*') ?: [] as $file) {
            @unlink($file);
        }
        @rmdir($this->dir);
    }
}
