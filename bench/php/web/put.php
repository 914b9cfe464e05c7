<?php

declare(strict_types=1);

// The php-curl PUT of BENCH_FILE to BENCH_URL (httpd collection, ends in /) under a new random name
// that direct.php and finish.php make, new handle each time; returns the HTTP status, 0 when curl failed.
function benchPut(string $prefix): int
{
    $file = getenv('BENCH_FILE');
    $in = fopen($file, 'rb');
    $ch = curl_init(getenv('BENCH_URL') . $prefix . bin2hex(random_bytes(8)) . '.bin');
    curl_setopt_array($ch, [CURLOPT_UPLOAD => true, CURLOPT_INFILE => $in, CURLOPT_INFILESIZE => filesize($file), CURLOPT_RETURNTRANSFER => true]);
    $ok = curl_exec($ch);
    $status = curl_getinfo($ch, CURLINFO_RESPONSE_CODE);
    curl_close($ch);
    fclose($in);
    return $ok === false ? 0 : $status;
}
