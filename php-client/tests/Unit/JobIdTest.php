<?php

declare(strict_types=1);

namespace TransferSidecar\Tests\Unit;

use PHPUnit\Framework\TestCase;
use TransferSidecar\JobId;

final class JobIdTest extends TestCase
{
    public function testIdsAre22Base64urlCharactersMatchingTheDaemonsRule(): void
    {
        $seen = [];
        for ($i = 0; $i < 2000; $i++) {
            $id = JobId::generate();
            self::assertMatchesRegularExpression('/^[A-Za-z0-9_-]{22}$/', $id);
            self::assertTrue(JobId::isValid($id));
            $seen[$id] = true;
        }
        self::assertCount(2000, $seen, 'ids are unique');
    }

    public function testValidation(): void
    {
        self::assertTrue(JobId::isValid('early-job-0001'));
        self::assertTrue(JobId::isValid(str_repeat('a', 64)));
        self::assertFalse(JobId::isValid('short'));
        self::assertFalse(JobId::isValid(str_repeat('a', 65)));
        self::assertFalse(JobId::isValid('../../etc/passwd'));
        self::assertFalse(JobId::isValid("abcdefgh\n"));
        self::assertFalse(JobId::isValid('abcdefgh/x'));
    }
}
