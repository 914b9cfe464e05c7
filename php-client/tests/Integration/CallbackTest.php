<?php

declare(strict_types=1);

namespace TransferSidecar\Tests\Integration;

use TransferSidecar\Signature;

/**
 * Completion callbacks: the daemon POSTs the finished job to the job's callback URL, signed with
 * callbacks.secret; Signature::verify() accepts it. A socket server in this process plays the
 * PHP application's callback endpoint.
 */
final class CallbackTest extends IntegrationTestCase
{
    public function testTheDaemonPostsASignedCallbackWhenTheJobEnds(): void
    {
        $prefix = self::env('SIDECAR_CALLBACK_URL');
        $url = parse_url($prefix);
        $server = @stream_socket_server(sprintf('tcp://%s:%d', $url['host'], $url['port']), $errno, $errstr);
        self::assertNotFalse($server, "cannot listen for callbacks on $prefix: $errstr");

        $client = self::unixClient();
        [$src, $sha] = self::makeFile('callback.bin', 2048);
        $id = $client->upload('local', $src, '/php/' . self::$run . '/callback.bin', ['callback' => $prefix . 'transfer-done?ref=42']);
        self::assertSucceeds($client, $id);

        $conn = @stream_socket_accept($server, 20);
        self::assertNotFalse($conn, 'no callback within 20 s');
        stream_set_timeout($conn, 10);
        [$requestLine, $headers, $body] = self::readRequest($conn);
        fwrite($conn, "HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n");
        fclose($conn);
        fclose($server);

        self::assertStringStartsWith('POST ' . $url['path'] . 'transfer-done?ref=42 HTTP/1.1', $requestLine);
        self::assertSame($id, $headers['x-sidecar-job'] ?? null);
        self::assertArrayHasKey('x-sidecar-signature', $headers);
        self::assertTrue(Signature::verify($body, $headers['x-sidecar-timestamp'] ?? '', $headers['x-sidecar-signature'], self::env('SIDECAR_CALLBACK_SECRET')));
        self::assertFalse(Signature::verify($body . ' ', $headers['x-sidecar-timestamp'], $headers['x-sidecar-signature'], self::env('SIDECAR_CALLBACK_SECRET')));
        $job = json_decode($body, true);
        self::assertSame([$id, 'succeeded', $sha], [$job['id'] ?? null, $job['state'] ?? null, $job['sha256'] ?? null]);

        $deadline = microtime(true) + 10;
        while (($client->status($id)['callbackState'] ?? null) !== 'delivered' && microtime(true) < $deadline) {
            usleep(50000);
        }
        self::assertSame('delivered', $client->status($id)['callbackState'] ?? null);
    }

    /**
     * @param resource $conn
     * @return array{0: string, 1: array<string, string>, 2: string}
     */
    private static function readRequest($conn): array
    {
        $requestLine = rtrim((string) fgets($conn), "\r\n");
        $headers = [];
        while (($line = fgets($conn)) !== false && rtrim($line, "\r\n") !== '') {
            [$name, $value] = explode(':', $line, 2);
            $headers[strtolower(trim($name))] = trim($value);
        }
        $length = (int) ($headers['content-length'] ?? 0);
        $body = $length > 0 ? (string) stream_get_contents($conn, $length) : '';
        return [$requestLine, $headers, $body];
    }
}
