<?php

declare(strict_types=1);

namespace TransferSidecar\Tests\Unit;

use PHPUnit\Framework\TestCase;
use TransferSidecar\Signature;

final class SignatureTest extends TestCase
{
    private const SECRET = 'callback-secret-0123456789';
    private const BODY = '{"id":"p1X8abcdefgh","state":"succeeded"}';
    private const NOW = 1_800_000_000;

    public function testSignIsHmacSha256OfTimestampDotBody(): void
    {
        self::assertSame(
            'sha256=' . hash_hmac('sha256', self::NOW . '.' . self::BODY, self::SECRET),
            Signature::sign(self::BODY, self::SECRET, self::NOW)
        );
        self::assertMatchesRegularExpression('/^sha256=[0-9a-f]{64}$/', Signature::sign('', self::SECRET, 0));
    }

    public function testVerifiesAGoodSignature(): void
    {
        $header = Signature::sign(self::BODY, self::SECRET, self::NOW);
        self::assertTrue(Signature::verify(self::BODY, (string) self::NOW, $header, self::SECRET, 300, self::NOW));
        $upper = 'sha256=' . strtoupper(substr($header, 7));
        self::assertTrue(Signature::verify(self::BODY, (string) self::NOW, $upper, self::SECRET, 300, self::NOW + 299), 'hex case does not matter');
    }

    public function testRejectsATamperedBody(): void
    {
        $header = Signature::sign(self::BODY, self::SECRET, self::NOW);
        self::assertFalse(Signature::verify(str_replace('succeeded', 'failed', self::BODY), (string) self::NOW, $header, self::SECRET, 300, self::NOW));
        self::assertFalse(Signature::verify(self::BODY . ' ', (string) self::NOW, $header, self::SECRET, 300, self::NOW));
    }

    public function testRejectsAWrongSecret(): void
    {
        $header = Signature::sign(self::BODY, 'another-secret-0123456789', self::NOW);
        self::assertFalse(Signature::verify(self::BODY, (string) self::NOW, $header, self::SECRET, 300, self::NOW));
        self::assertFalse(Signature::verify(self::BODY, (string) self::NOW, Signature::sign(self::BODY, '', self::NOW), '', 300, self::NOW));
    }

    public function testRejectsTimestampsOutsideTheTolerance(): void
    {
        $header = Signature::sign(self::BODY, self::SECRET, self::NOW);
        self::assertFalse(Signature::verify(self::BODY, (string) self::NOW, $header, self::SECRET, 300, self::NOW + 301), 'stale');
        self::assertFalse(Signature::verify(self::BODY, (string) self::NOW, $header, self::SECRET, 300, self::NOW - 301), 'from the future');
        self::assertTrue(Signature::verify(self::BODY, (string) self::NOW, $header, self::SECRET, 300, self::NOW + 300));
    }

    public function testRejectsAMismatchedOrMalformedTimestamp(): void
    {
        $header = Signature::sign(self::BODY, self::SECRET, self::NOW);
        self::assertFalse(Signature::verify(self::BODY, (string) (self::NOW + 1), $header, self::SECRET, 300, self::NOW));
        foreach (['', ' 1800000000', '1800000000.0', '-5', 'abc'] as $bad) {
            self::assertFalse(Signature::verify(self::BODY, $bad, $header, self::SECRET, 300, self::NOW), $bad);
        }
    }

    public function testRejectsMalformedHeadersAndAcceptsOneOfSeveral(): void
    {
        $good = Signature::sign(self::BODY, self::SECRET, self::NOW);
        self::assertFalse(Signature::verify(self::BODY, (string) self::NOW, substr($good, 7), self::SECRET, 300, self::NOW), 'without sha256= prefix');
        self::assertFalse(Signature::verify(self::BODY, (string) self::NOW, '', self::SECRET, 300, self::NOW));
        $rotated = Signature::sign(self::BODY, 'old-secret-0123456789ab', self::NOW) . ', ' . $good;
        self::assertTrue(Signature::verify(self::BODY, (string) self::NOW, $rotated, self::SECRET, 300, self::NOW));
    }
}
