<?php

declare(strict_types=1);

namespace TransferSidecar\Tests\Integration;

/**
 * passthru(): a file streamed from a target through the daemon's /v1/stream to php://output.
 */
final class StreamTest extends IntegrationTestCase
{
    /** @return iterable<string, array{0: string}> */
    public static function targets(): iterable
    {
        yield 'local' => ['local'];
        yield 'files' => ['files'];
        yield 'hdfs' => ['hdfs'];
    }

    /** @dataProvider targets */
    public function testPassthruWholeAndRange(string $target): void
    {
        $client = self::unixClient();
        $size = (3 << 20) + 7;
        [$src, $sha] = self::makeFile("stream-$target.bin", $size);
        $remote = sprintf('/php/%s/stream/%s a+b.bin', self::$run, $target);
        self::assertSucceeds($client, $client->upload($target, $src, $remote));

        ob_start();
        $n = $client->passthru($target, $remote);
        $out = (string) ob_get_clean();
        self::assertSame($size, $n);
        self::assertSame($sha, hash('sha256', $out));

        ob_start();
        $n = $client->passthru($target, $remote, 'bytes=1000-1999');
        $out = (string) ob_get_clean();
        self::assertSame(1000, $n);
        self::assertSame(file_get_contents($src, false, null, 1000, 1000), $out);

        // the connection is still usable after streaming
        self::assertSucceeds($client, $client->upload($target, $src, $remote . '.2'));
        unlink($src);
    }

    public function testAMissingFileForwardsTheDaemonsError(): void
    {
        $client = self::tcpClient();
        ob_start();
        $client->passthru('files', '/php/' . self::$run . '/no-such-file.bin');
        $out = (string) ob_get_clean();
        self::assertSame('REMOTE_NOT_FOUND', json_decode($out, true)['error']['code'] ?? null, $out);
    }
}
