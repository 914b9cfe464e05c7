<?php

declare(strict_types=1);

namespace TransferSidecar\Tests\Integration;

final class RoundTripTest extends IntegrationTestCase
{
    /** @return iterable<string, array{0: string, 1: string}> */
    public static function targetsAndTransports(): iterable
    {
        foreach (['local', 'files', 'hdfs'] as $target) {
            foreach (['unix', 'tcp'] as $transport) {
                yield "$target over $transport" => [$target, $transport];
            }
        }
    }

    /** @dataProvider targetsAndTransports */
    public function testUploadWaitDownloadKeepsTheSha256(string $target, string $transport): void
    {
        $client = $transport === 'unix' ? self::unixClient() : self::tcpClient();
        $size = (1 << 20) + 12345;
        [$src, $sha] = self::makeFile("$target-$transport.src", $size);
        $remote = sprintf('/php/%s/%s %s/ä-%s.bin', self::$run, $target, $transport, $transport);

        $id = $client->upload($target, $src, $remote, ['sha256' => $sha]);
        self::assertMatchesRegularExpression('/^[A-Za-z0-9_-]{22}$/', $id);
        self::assertIsFloat($client->lastHandoffSeconds());
        $up = self::assertSucceeds($client, $id);
        self::assertSame($id, $up['id']);
        self::assertSame([$size, $sha, 'upload', $target], [$up['bytes'], $up['sha256'], $up['direction'], $up['target']]);

        $back = self::$dir . "/$target-$transport.back";
        $down = self::assertSucceeds($client, $client->download($target, $back, $remote, ['sha256' => $sha]));
        self::assertSame($size, $down['bytes']);
        self::assertSame($sha, hash_file('sha256', $back));

        // overwrite goes through as a boolean
        $again = $client->wait($client->download($target, $back, $remote), 60);
        self::assertSame('LOCAL_EXISTS', $again['error']['code'] ?? null, json_encode($again));
        self::assertSucceeds($client, $client->download($target, $back, $remote, ['overwrite' => true]));
        unlink($src);
        unlink($back);
    }

    public function testDigestNoneIsSentAndSkipsTheSha256(): void
    {
        $client = self::unixClient();
        [$src] = self::makeFile('digest-none.src', 5000);
        $job = self::assertSucceeds($client, $client->upload('local', $src, sprintf('/php/%s/digest-none.bin', self::$run), ['digest' => 'none']));
        self::assertSame(['none', null, 5000], [$job['digest'], $job['sha256'], $job['bytes']]);
        unlink($src);
    }
}
